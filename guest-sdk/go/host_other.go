//go:build !wasip1

package tollgate

import (
	"fmt"
	"os"
)

// Outside WebAssembly (go test, go vet) the host imports are stand-ins: Log prints to stderr,
// Config reads TestConfig, Fetch fails.

// TestConfig is what Config returns outside WebAssembly (for unit tests of handlers).
var TestConfig = map[string]string{}

func logEmit(level uint32, msg string) { fmt.Fprintf(os.Stderr, "[log %d] %s\n", level, msg) }

func configGet(key string) (string, bool) {
	v, ok := TestConfig[key]
	return v, ok
}

func fetch(req Request) (*Response, error) {
	return nil, &HTTPError{Code: "internal-error", Message: "Fetch works only inside a tool component"}
}
