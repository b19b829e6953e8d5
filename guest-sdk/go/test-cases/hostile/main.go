// Command hostile is a test guest for the sandbox's limits: `spin` never returns (the epoch
// deadline must stop it), `mem_bomb` allocates until the memory cap stops it, `echo` answers
// normally (the next call must work after either).
package main

import (
	"encoding/json"

	"tollgate.invalid/tollgate"
)

var hoard [][]byte

func init() {
	tollgate.Register(
		tollgate.Tool{
			Name:        "spin",
			Description: "Loops forever.",
			InputSchema: `{"type":"object"}`,
			Handler: func(json.RawMessage, *tollgate.Execution) (tollgate.Output, error) {
				n := 0
				for {
					n++
				}
			},
		},
		tollgate.Tool{
			Name:        "memory_bomb",
			Description: "Allocates 1 MiB blocks until something stops it.",
			InputSchema: `{"type":"object"}`,
			Handler: func(json.RawMessage, *tollgate.Execution) (tollgate.Output, error) {
				for {
					b := make([]byte, 1<<20)
					for i := range b {
						b[i] = byte(i)
					}
					hoard = append(hoard, b)
				}
			},
		},
		tollgate.Tool{
			Name:        "echo",
			Description: "Returns its arguments.",
			InputSchema: `{"type":"object"}`,
			Annotations: tollgate.Annotations{ReadOnly: true, Idempotent: true},
			Handler: func(args json.RawMessage, _ *tollgate.Execution) (tollgate.Output, error) {
				return tollgate.Text(string(args)), nil
			},
		},
	)
}

func main() {}
