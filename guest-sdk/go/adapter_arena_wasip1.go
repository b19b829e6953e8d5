//go:build wasip1

package tollgate

// adapterArena is memory for the wasi_snapshot_preview1 adapter (its shadow stack and state).
//
// The reactor adapter allocates on its first call, through the main module's cabi_realloc. That
// first call is clock_time_get inside Go's runtime init (nanotime in schedinit), before any Go
// code may run, so Go's cabi_realloc cannot serve it. The build's patch step
// (cmd/tollgate-patch-core) appends a raw wasm bump allocator over this array, exported as
// `cabi_realloc_adapter`, which wit-component wires into the adapter instead of cabi_realloc. The
// array lives in Go's BSS, below the Go heap, and no Go code touches it.
var adapterArena [adapterArenaSize]byte

// adapterArenaSize must equal the size the patch step assumes (cmd/tollgate-patch-core).
const adapterArenaSize = 192 << 10

// adapterArenaInfo tells the patch step where the arena is: Go's linker writes this statically
// initialized struct into a data segment, where the patch step finds the marker and reads the
// address after it.
var adapterArenaInfo = struct {
	marker [24]byte
	base   *byte
	size   uint64
}{
	marker: [24]byte{'t', 'o', 'l', 'l', 'g', 'a', 't', 'e', ':', 'a', 'd', 'a', 'p', 't', 'e', 'r', '-', 'a', 'r', 'e', 'n', 'a', ':', '1'},
	base:   &adapterArena[0],
	size:   adapterArenaSize,
}

// adapterArenaBase keeps adapterArenaInfo (and so the arena) through dead-code elimination.
//
//go:noinline
func adapterArenaBase() uintptr { return uintptr(adapterArenaInfo.size) }
