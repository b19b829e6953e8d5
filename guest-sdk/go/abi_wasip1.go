//go:build wasip1

// Hand-written canonical-ABI glue for the world tollgate:tool/tool-provider@0.1.0. The layouts are
// the constants of layout.go, checked against the WIT by witcheck_test.go.
//
// Memory ownership:
//   - Memory handed to the host (return values) stays reachable in retPins until the host calls
//     the matching cabi_post_* export. Go's GC does not move objects, so keeping a reference pins.
//   - Memory the host writes into (export arguments, import results) is allocated by cabi_realloc
//     from a pre-allocated arena (see cabiRealloc), copied out at once, and the arena is reset.
package tollgate

import "unsafe"

var retPins [][]byte

// allocPinned returns an aligned block of size bytes that stays alive until release.
func allocPinned(pins *[][]byte, size, align uint32) uint32 {
	if size == 0 {
		return align
	}
	buf := make([]byte, size+align)
	p := uint32(uintptr(unsafe.Pointer(&buf[0])))
	*pins = append(*pins, buf)
	return (p + align - 1) &^ (align - 1)
}

// The arena behind cabi_realloc. cabi_realloc runs while the host lowers values into this
// instance, and during that window the instance may not call any import ("cannot leave component
// instance"). Go's allocator can call clock_time_get (nanotime) when it grows the heap, so
// cabi_realloc must not allocate from the Go heap: it bump-allocates from argArena. The arena is
// reset once the values are copied out, and regrown (in ordinary code, where imports are allowed)
// when a request did not fit.
var (
	argArena  []byte
	argOff    uint32
	argWant   uint32
	hostPins  [][]byte // fallback blocks when the arena is full
	arenaInit bool
)

const initialArena = 1 << 20

func ensureArena() {
	if !arenaInit {
		argArena = make([]byte, initialArena)
		arenaInit = true
	}
}

func init() { ensureArena() }

//go:wasmexport cabi_realloc
func cabiRealloc(oldPtr, oldSize, align, newSize uint32) uint32 {
	if align == 0 {
		align = 1
	}
	base := uint32(uintptr(unsafe.Pointer(&argArena[0])))
	start := (base + argOff + align - 1) &^ (align - 1)
	if start+newSize > base+uint32(len(argArena)) {
		// Does not fit: remember the size for next time and fall back to the Go heap, which may
		// trap if the allocator decides to call an import. regrowArena makes the next one fit.
		argWant = max(argWant, argOff+newSize+align)
		p := allocPinned(&hostPins, newSize, align)
		if oldPtr != 0 && oldSize != 0 {
			copy(mem(p, min(oldSize, newSize)), mem(oldPtr, min(oldSize, newSize)))
		}
		return p
	}
	if oldPtr != 0 && oldSize != 0 {
		copy(mem(start, min(oldSize, newSize)), mem(oldPtr, min(oldSize, newSize)))
	}
	argOff = start + newSize - base
	return start
}

// hostValuesConsumed resets the arena once the values the host wrote are copied out.
func hostValuesConsumed() {
	argOff = 0
	hostPins = nil
}

// regrowArena runs where allocating is safe (not inside cabi_realloc).
func regrowArena() {
	if argWant > uint32(len(argArena)) {
		argArena = make([]byte, 2*argWant)
	}
	argWant = 0
}

func mem(ptr, n uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(uintptr(ptr))), n)
}

// loadString copies a string out of instance memory.
func loadString(ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(mem(ptr, n))
}

func loadBytes(ptr, n uint32) []byte {
	out := make([]byte, n)
	copy(out, mem(ptr, n))
	return out
}

func getU8(addr uint32) uint8   { return *(*uint8)(unsafe.Pointer(uintptr(addr))) }
func getU32(addr uint32) uint32 { return *(*uint32)(unsafe.Pointer(uintptr(addr))) }

func putU8(addr uint32, v uint8)   { *(*uint8)(unsafe.Pointer(uintptr(addr))) = v }
func putU32(addr uint32, v uint32) { *(*uint32)(unsafe.Pointer(uintptr(addr))) = v } // little-endian

// putString stores a copy of s (pinned until post-return) as {ptr, len} at addr.
func putString(addr uint32, s string) {
	p := allocPinned(&retPins, uint32(len(s)), 1)
	copy(mem(p, uint32(len(s))), s)
	putU32(addr, p)
	putU32(addr+4, uint32(len(s)))
}

func putBytes(addr uint32, b []byte) {
	p := allocPinned(&retPins, uint32(len(b)), 1)
	copy(mem(p, uint32(len(b))), b)
	putU32(addr, p)
	putU32(addr+4, uint32(len(b)))
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Import arguments are copied into heap blocks held in importPins until the import returns: a
// Go string or slice may live on a goroutine stack, which the runtime can move.
var importPins [][]byte

// stringArg copies s for an import and returns its {ptr, len}. Call importDone afterwards.
func stringArg(s string) (uint32, uint32) {
	p := allocPinned(&importPins, uint32(len(s)), 1)
	copy(mem(p, uint32(len(s))), s)
	return p, uint32(len(s))
}

func bytesArg(b []byte) (uint32, uint32) {
	p := allocPinned(&importPins, uint32(len(b)), 1)
	copy(mem(p, uint32(len(b))), b)
	return p, uint32(len(b))
}

// importRet is the return area of imports whose results do not fit in one core value. It is in
// BSS (it never moves) and 8-byte aligned; every import reads it right after the call.
var importRet [8]uint64

func retArea() uint32 {
	importRet = [8]uint64{}
	return uint32(uintptr(unsafe.Pointer(&importRet[0])))
}

// importDone releases the argument copies and the host-written values of the last import.
func importDone() {
	importPins = nil
	hostValuesConsumed()
}

// ---- imports ----

//go:wasmimport tollgate:tool/log@0.1.0 emit
func importLogEmit(level, ptr, n uint32)

//go:wasmimport tollgate:tool/config@0.1.0 get
func importConfigGet(ptr, n, ret uint32)

func logEmit(level uint32, msg string) {
	p, n := stringArg(msg)
	importLogEmit(level, p, n)
	importDone()
}

func configGet(key string) (string, bool) {
	ret := retArea()
	p, n := stringArg(key)
	importConfigGet(p, n, ret)
	defer importDone()
	if getU8(ret) == 0 {
		return "", false
	}
	return loadString(getU32(ret+optionStringOff), getU32(ret+optionStringOff+4)), true
}

// ---- exports ----

//go:wasmexport tollgate:tool/tools@0.1.0#list-tools
func exportListTools() uint32 {
	if adapterArenaBase() == 0 { // keeps the adapter arena (and its marker) in the binary
		panic("tollgate: no adapter arena")
	}
	specs := tools()
	arr := allocPinned(&retPins, uint32(len(specs))*toolSpecSize, 4)
	for i, t := range specs {
		b := arr + uint32(i)*toolSpecSize
		putString(b+toolSpecNameOff, t.Name)
		putString(b+toolSpecDescOff, t.Description)
		putString(b+toolSpecSchemaOff, t.InputSchema)
		a := b + toolSpecAnnotOff
		putU8(a+annotReadOnlyOff, b2u(t.Annotations.ReadOnly))
		putU8(a+annotIdempotentOff, b2u(t.Annotations.Idempotent))
		putU8(a+annotDestructiveOff, b2u(t.Annotations.Destructive))
		putU8(a+annotOpenWorldOff, b2u(t.Annotations.OpenWorld))
	}
	ret := allocPinned(&retPins, stringSize, 4)
	putU32(ret, arr)
	putU32(ret+4, uint32(len(specs)))
	return ret
}

//go:wasmexport cabi_post_tollgate:tool/tools@0.1.0#list-tools
func postListTools(uint32) { retPins = nil }

//go:wasmexport tollgate:tool/tools@0.1.0#call
func exportCall(namePtr, nameLen, argsPtr, argsLen, execIsSome, sidPtr, sidLen, tidPtr, tidLen,
	tcidPtr, tcidLen, attempt, keyPtr, keyLen uint32) uint32 {
	name := loadString(namePtr, nameLen)
	args := loadString(argsPtr, argsLen)
	var exec *Execution
	if execIsSome != 0 {
		exec = &Execution{
			SessionID:      loadString(sidPtr, sidLen),
			TurnID:         loadString(tidPtr, tidLen),
			ToolCallID:     loadString(tcidPtr, tcidLen),
			Attempt:        attempt,
			IdempotencyKey: loadString(keyPtr, keyLen),
		}
	}
	hostValuesConsumed()
	defer regrowArena()

	out, cerr := dispatch(name, args, exec)
	ret := allocPinned(&retPins, callResultSize, 4)
	pl := ret + callResultPayloadOff
	if cerr != nil {
		putU8(ret, 1)
		if cerr.Retryable {
			putU8(pl, callErrorRetryable)
		} else {
			putU8(pl, callErrorFailed)
		}
		putString(pl+callErrorStringOff, cerr.Message)
		return ret
	}
	putU8(ret, 0)
	arr := allocPinned(&retPins, uint32(len(out.Content))*contentSize, 4)
	for i, c := range out.Content {
		b := arr + uint32(i)*contentSize
		if c.Image != nil {
			putU8(b, contentImage)
			putString(b+contentPayloadOff+imageMediaTypeOff, c.Image.MediaType)
			putBytes(b+contentPayloadOff+imageDataOff, c.Image.Data)
		} else {
			putU8(b, contentText)
			putString(b+contentPayloadOff, c.Text)
		}
	}
	putU32(pl+toolOutputContentOff, arr)
	putU32(pl+toolOutputContentOff+4, uint32(len(out.Content)))
	putU8(pl+toolOutputIsErrorOff, b2u(out.IsError))
	return ret
}

//go:wasmexport cabi_post_tollgate:tool/tools@0.1.0#call
func postCall(uint32) { retPins = nil }
