// Command tollgate-patch-core adds a raw-wasm `cabi_realloc_adapter` export to a Go wasip1
// c-shared core module, so that the wasi_snapshot_preview1 reactor adapter can allocate before
// Go's runtime has started (see adapter_arena_wasip1.go in the parent package).
//
// Usage: tollgate-patch-core IN.wasm OUT.wasm
//
// It reads the arena's address from the SDK's adapterArenaInfo (a marker followed by the address,
// in the initial memory that the data segments describe), then appends to the module, without renumbering anything: a function type
// (i32 i32 i32 i32) -> i32, a mutable i32 global (the bump pointer), the allocator function and
// its export. It edits the binary directly (printing a Go module as text takes ~100 MB).
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// Must match adapter_arena_wasip1.go.
var marker = []byte("tollgate:adapter-arena:1")

const arenaSize = 192 << 10

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tollgate-patch-core IN.wasm OUT.wasm")
		os.Exit(2)
	}
	in, err := os.ReadFile(os.Args[1])
	if err == nil {
		var out []byte
		out, err = patch(in)
		if err == nil {
			err = os.WriteFile(os.Args[2], out, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-patch-core:", err)
		os.Exit(1)
	}
}

type section struct {
	id   byte
	body []byte
}

func uleb(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("bad LEB128")
}

func putULEB(v uint64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, c|0x80)
		} else {
			return append(out, c)
		}
	}
}

func putSLEB32(v int32) []byte {
	var out []byte
	x := int64(v)
	for {
		c := byte(x & 0x7f)
		x >>= 7
		if (x == 0 && c&0x40 == 0) || (x == -1 && c&0x40 != 0) {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

func parse(m []byte) ([]section, error) {
	if len(m) < 8 || !bytes.Equal(m[:8], []byte{0, 'a', 's', 'm', 1, 0, 0, 0}) {
		return nil, errors.New("not a core wasm module")
	}
	var out []section
	for p := 8; p < len(m); {
		id := m[p]
		size, n, err := uleb(m[p+1:])
		if err != nil || p+1+n+int(size) > len(m) {
			return nil, fmt.Errorf("bad section at offset %d", p)
		}
		start := p + 1 + n
		out = append(out, section{id, m[start : start+int(size)]})
		p = start + int(size)
	}
	return out, nil
}

// vecCount returns a vector section's element count and the bytes after it.
func vecCount(body []byte) (uint64, []byte, error) {
	n, k, err := uleb(body)
	return n, body[k:], err
}

// appendToVec adds one element to a vector section.
func appendToVec(body, elem []byte) ([]byte, error) {
	n, rest, err := vecCount(body)
	if err != nil {
		return nil, err
	}
	out := append(putULEB(n+1), rest...)
	return append(out, elem...), nil
}

// importCounts counts imported functions and globals.
func importCounts(body []byte) (funcs, globals uint64, err error) {
	n, p, err := vecCount(body)
	if err != nil {
		return 0, 0, err
	}
	skipName := func() error {
		l, k, err := uleb(p)
		if err != nil {
			return err
		}
		p = p[k+int(l):]
		return nil
	}
	for i := uint64(0); i < n; i++ {
		if err := skipName(); err != nil {
			return 0, 0, err
		}
		if err := skipName(); err != nil {
			return 0, 0, err
		}
		kind := p[0]
		p = p[1:]
		switch kind {
		case 0: // func: typeidx
			_, k, _ := uleb(p)
			p = p[k:]
			funcs++
		case 1: // table: reftype limits
			p = p[1:]
			p = skipLimits(p)
		case 2: // memory: limits
			p = skipLimits(p)
		case 3: // global: valtype mut
			p = p[2:]
			globals++
		default:
			return 0, 0, fmt.Errorf("import kind %d not supported", kind)
		}
	}
	return funcs, globals, nil
}

func skipLimits(p []byte) []byte {
	flags := p[0]
	p = p[1:]
	_, k, _ := uleb(p)
	p = p[k:]
	if flags&1 != 0 {
		_, k, _ = uleb(p)
		p = p[k:]
	}
	return p
}

// dataSegment is an active data segment: its bytes land at addr in linear memory.
type dataSegment struct {
	addr uint64
	data []byte
}

// dataSegments decodes the data section (Go emits active segments with i32.const offsets, and
// leaves runs of zeros out, so memory must be rebuilt from the segments rather than read from the
// file).
func dataSegments(body []byte) ([]dataSegment, error) {
	n, p, err := vecCount(body)
	if err != nil {
		return nil, err
	}
	var out []dataSegment
	for i := uint64(0); i < n; i++ {
		flags, k, err := uleb(p)
		if err != nil {
			return nil, err
		}
		p = p[k:]
		var addr uint64
		switch flags {
		case 0, 2:
			if flags == 2 {
				_, k, _ = uleb(p) // memory index
				p = p[k:]
			}
			if p[0] != 0x41 {
				return nil, fmt.Errorf("data segment %d: offset is not an i32.const", i)
			}
			v, k, err := sleb(p[1:])
			if err != nil || p[1+k] != 0x0b {
				return nil, fmt.Errorf("data segment %d: bad offset expression", i)
			}
			addr = uint64(uint32(v))
			p = p[2+k:]
		case 1:
		default:
			return nil, fmt.Errorf("data segment %d: flags %d", i, flags)
		}
		size, k, err := uleb(p)
		if err != nil || k+int(size) > len(p) {
			return nil, fmt.Errorf("data segment %d: bad size", i)
		}
		if flags != 1 {
			out = append(out, dataSegment{addr, p[k : k+int(size)]})
		}
		p = p[k+int(size):]
	}
	return out, nil
}

func sleb(b []byte) (int64, int, error) {
	var v int64
	var shift uint
	for i := 0; i < len(b) && i < 10; i++ {
		v |= int64(b[i]&0x7f) << shift
		shift += 7
		if b[i]&0x80 == 0 {
			if shift < 64 && b[i]&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("bad LEB128")
}

// readMem reads n bytes of initial memory at addr (zero where no segment covers it).
func readMem(segs []dataSegment, addr uint64, n int) []byte {
	out := make([]byte, n)
	for _, s := range segs {
		for i := 0; i < n; i++ {
			a := addr + uint64(i)
			if a >= s.addr && a < s.addr+uint64(len(s.data)) {
				out[i] = s.data[a-s.addr]
			}
		}
	}
	return out
}

// arenaBase finds adapterArenaInfo in the initial memory: the marker, then (Go struct layout,
// 8-byte fields) the arena's address and its size.
func arenaBase(segs []dataSegment) (uint64, error) {
	var at []uint64
	for _, s := range segs {
		for off := 0; ; {
			i := bytes.Index(s.data[off:], marker)
			if i < 0 {
				break
			}
			at = append(at, s.addr+uint64(off+i))
			off += i + 1
		}
	}
	if len(at) != 1 {
		return 0, fmt.Errorf("adapter arena marker found %d times, want once: was the module built with the tollgate Go SDK?", len(at))
	}
	info := readMem(segs, at[0]+uint64(len(marker)), 16)
	base := binary.LittleEndian.Uint64(info)
	size := binary.LittleEndian.Uint64(info[8:])
	if size != arenaSize {
		return 0, fmt.Errorf("adapter arena size %d, this patcher assumes %d", size, arenaSize)
	}
	if base == 0 || base+arenaSize > 1<<31 {
		return 0, fmt.Errorf("adapter arena address %#x out of range", base)
	}
	return base, nil
}

func patch(m []byte) ([]byte, error) {
	secs, err := parse(m)
	if err != nil {
		return nil, err
	}
	idx := map[byte]int{}
	for i, s := range secs {
		if s.id != 0 {
			idx[s.id] = i
		}
	}
	for _, id := range []byte{1, 3, 6, 7, 10, 11} {
		if _, ok := idx[id]; !ok {
			return nil, fmt.Errorf("module has no section %d", id)
		}
	}
	segs, err := dataSegments(secs[idx[11]].body)
	if err != nil {
		return nil, err
	}
	base, err := arenaBase(segs)
	if err != nil {
		return nil, err
	}
	end := base + arenaSize
	var importedFuncs, importedGlobals uint64
	if i, ok := idx[2]; ok {
		if importedFuncs, importedGlobals, err = importCounts(secs[i].body); err != nil {
			return nil, err
		}
	}
	types, _, _ := vecCount(secs[idx[1]].body)
	funcs, _, _ := vecCount(secs[idx[3]].body)
	globals, _, _ := vecCount(secs[idx[6]].body)
	exports := secs[idx[7]].body
	if bytes.Contains(exports, []byte("cabi_realloc_adapter")) {
		return nil, errors.New("module already exports cabi_realloc_adapter")
	}
	typeIdx := types
	funcIdx := importedFuncs + funcs
	g := putULEB(importedGlobals + globals)

	// (func (param $old i32) (param $old_size i32) (param $align i32) (param $new_size i32)
	//   (result i32) (local $p i32)
	//   old != 0 -> unreachable (the adapter only allocates)
	//   p = (bump + align - 1) & -align; p + new_size > end -> unreachable
	//   bump = p + new_size; return p)
	code := []byte{1, 1, 0x7f} // one local i32
	code = append(code, 0x20, 0, 0x04, 0x40, 0x00, 0x0b)
	code = append(code, 0x23)
	code = append(code, g...)
	code = append(code, 0x20, 2, 0x6a, 0x41, 1, 0x6b, 0x41, 0, 0x20, 2, 0x6b, 0x71, 0x22, 4, 0x20, 3, 0x6a, 0x41)
	code = append(code, putSLEB32(int32(uint32(end)))...)
	code = append(code, 0x4b, 0x04, 0x40, 0x00, 0x0b)
	code = append(code, 0x20, 4, 0x20, 3, 0x6a, 0x24)
	code = append(code, g...)
	code = append(code, 0x20, 4, 0x0b)
	body := append(putULEB(uint64(len(code))), code...)

	name := []byte("cabi_realloc_adapter")
	export := append(putULEB(uint64(len(name))), name...)
	export = append(export, 0)
	export = append(export, putULEB(funcIdx)...)

	global := append([]byte{0x7f, 1, 0x41}, putSLEB32(int32(uint32(base)))...)
	global = append(global, 0x0b)

	edits := []struct {
		id   byte
		elem []byte
	}{
		{1, []byte{0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f}},
		{3, putULEB(typeIdx)},
		{6, global},
		{7, export},
		{10, body},
	}
	for _, e := range edits {
		s := &secs[idx[e.id]]
		if s.body, err = appendToVec(s.body, e.elem); err != nil {
			return nil, fmt.Errorf("section %d: %v", e.id, err)
		}
	}
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range secs {
		out = append(out, s.id)
		out = append(out, putULEB(uint64(len(s.body)))...)
		out = append(out, s.body...)
	}
	return out, nil
}
