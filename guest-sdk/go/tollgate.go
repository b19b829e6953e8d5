// Package tollgate lets you write Tollgate tools in Go: plain Go functions over JSON, built into a
// WebAssembly component of the world `tollgate:tool/tool-provider@0.1.0` (see ../../wit/tool).
//
// # Writing a tool
//
// A tool component is a Go `package main` that registers its tools in an `init` function and
// has an empty `main` (a component is a library: `main` never runs):
//
//	package main
//
//	import "tollgate.invalid/tollgate"
//
//	type lookupArgs struct {
//		OrderID string `json:"order_id"`
//	}
//
//	func init() {
//		tollgate.Register(tollgate.Tool{
//			Name:        "lookup_order",
//			Description: "Look up an order by id.",
//			InputSchema: `{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`,
//			Annotations: tollgate.Annotations{ReadOnly: true, Idempotent: true},
//			Handler: tollgate.Handle(func(a lookupArgs, exec *tollgate.Execution) (tollgate.Output, error) {
//				return tollgate.Text("order " + a.OrderID), nil
//			}),
//		})
//	}
//
//	func main() {}
//
// A handler returns one of:
//   - an [Output] (see [Text], [JSON] and [ErrorText]): the model reads it; `IsError` marks a
//     tool-level failure such as "order not found", which is recorded and never retried;
//   - an error made by [Failed] or [Retryable]: the handler itself failed (the WIT `call-error`).
//     A deferred idempotent write is attempted again with the same idempotency key after a
//     retryable error. Any other non-nil error is reported as `failed` with its text.
//
// `exec` is the deferred-execution context ([Execution]), or nil for an inline read. Send
// `exec.IdempotencyKey` to the remote system so a retried write happens once.
//
// The host imports are [Log]/[Logf] (the host's log), [Config] (keys the component's manifest
// grants) and [Fetch] (outbound HTTP through `wasi:http`, allowed only to the hosts the manifest
// lists; a denied request returns an [*HTTPError] with code `HTTP-request-denied`).
//
// # Building
//
// Run `guest-sdk/go/build.sh DIR OUT.wasm` (after `scripts/install-guest-toolchains.sh`). It runs
// `go build` for GOOS=wasip1 GOARCH=wasm with -buildmode=c-shared, patches the core module for the
// preview1 adapter, embeds the WIT and wraps it into a component with the wasmtime 48.0.8 reactor
// adapter. The module that uses this package needs, in its go.mod:
//
//	require tollgate.invalid/tollgate v0.0.0
//	replace tollgate.invalid/tollgate => ../path/to/guest-sdk/go
//
// Only the standard library is used: the build runs with GOPROXY=off.
//
// # Caveats
//
//   - The canonical ABI is hand-written (abi_wasip1.go, http_wasip1.go). Its layouts are checked
//     against the WIT by `go test` in this directory (witcheck_test.go), which the build runs: a
//     WIT change fails the build until the ABI code and layout.go are updated.
//   - Each call runs in a fresh instance; package-level state does not survive between calls.
//   - Handlers must not block on goroutines waiting for each other: a component call cannot yield
//     to the host. [Fetch] blocks the whole instance while it waits, which is what you want here.
package tollgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// Annotations classify a tool when no policy in the agent's tollgate.toml names it (MCP's tool
// annotations).
type Annotations struct {
	// ReadOnly: the tool changes nothing outside itself.
	ReadOnly bool
	// Idempotent: calling it again with the same arguments and idempotency key has the effect of
	// one call.
	Idempotent bool
	// Destructive: it may delete or overwrite data.
	Destructive bool
	// OpenWorld: it reaches systems outside the host.
	OpenWorld bool
}

// Execution is the durable step a deferred call runs in (WIT `deferred-execution`).
type Execution struct {
	SessionID  string
	TurnID     string
	ToolCallID string
	// Attempt is 1 on the first attempt; an idempotent tool may see 2 and 3 after retryable errors.
	Attempt uint32
	// IdempotencyKey is `<session-id>/<turn-id>/<tool-call-id>`, the same on every attempt.
	IdempotencyKey string
}

// Content is one block of output: text, or an image when Image is not nil.
type Content struct {
	Text  string
	Image *Image
}

// Image is an image block of output.
type Image struct {
	MediaType string
	Data      []byte
}

// Output is what a call produced (WIT `tool-output`).
type Output struct {
	Content []Content
	// IsError marks a tool-level failure the model should read (recorded `failed`, not retried).
	IsError bool
}

// Text is an Output with one text block.
func Text(s string) Output { return Output{Content: []Content{{Text: s}}} }

// ErrorText is an Output with one text block and IsError set.
func ErrorText(s string) Output { return Output{Content: []Content{{Text: s}}, IsError: true} }

// JSON is an Output with one text block holding v encoded as compact JSON.
func JSON(v any) (Output, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Output{}, Failed("encoding output: %v", err)
	}
	return Text(string(b)), nil
}

// CallError is the WIT `call-error`: the handler failed and produced no output for the model.
type CallError struct {
	// Retryable is true for `retryable` (transient: a timeout, a 503), false for `failed`.
	Retryable bool
	Message   string
}

func (e *CallError) Error() string {
	if e.Retryable {
		return "retryable: " + e.Message
	}
	return "failed: " + e.Message
}

// Failed is a permanent failure (`call-error.failed`).
func Failed(format string, args ...any) error {
	return &CallError{Message: fmt.Sprintf(format, args...)}
}

// Retryable is a transient failure (`call-error.retryable`).
func Retryable(format string, args ...any) error {
	return &CallError{Retryable: true, Message: fmt.Sprintf(format, args...)}
}

// Handler runs one call: args is the JSON arguments object (already validated by the host against
// the tool's input schema), exec the deferred-execution context or nil.
type Handler func(args json.RawMessage, exec *Execution) (Output, error)

// Handle adapts a function over a typed argument struct into a Handler: the arguments are decoded
// with encoding/json into a fresh A. A decoding error becomes `failed`.
func Handle[A any](f func(args A, exec *Execution) (Output, error)) Handler {
	return func(raw json.RawMessage, exec *Execution) (Output, error) {
		var a A
		if err := json.Unmarshal(raw, &a); err != nil {
			return Output{}, Failed("invalid arguments: %v", err)
		}
		return f(a, exec)
	}
}

// Tool is one tool of the component.
type Tool struct {
	// Name is unique across the agent's components: ASCII letters, digits, `_` and `-`, at most 64.
	Name string
	// Description tells the model what the tool does.
	Description string
	// InputSchema is the JSON Schema (JSON text) of the arguments object.
	InputSchema string
	Annotations Annotations
	Handler     Handler
}

var registry = map[string]Tool{}

// Register adds tools to the component. Call it from init. It panics on a duplicate or invalid
// name, an InputSchema that is not a JSON object, or a nil Handler: these are programming errors
// that the first `list-tools` would otherwise hide.
func Register(tools ...Tool) {
	for _, t := range tools {
		if err := validate(t); err != nil {
			panic("tollgate.Register: " + err.Error())
		}
		if _, dup := registry[t.Name]; dup {
			panic("tollgate.Register: duplicate tool " + t.Name)
		}
		registry[t.Name] = t
	}
}

func validate(t Tool) error {
	if t.Name == "" || len(t.Name) > 64 {
		return fmt.Errorf("tool name %q must have 1 to 64 characters", t.Name)
	}
	for _, c := range t.Name {
		if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("tool name %q: only ASCII letters, digits, '_' and '-'", t.Name)
		}
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(t.InputSchema), &schema); err != nil {
		return fmt.Errorf("tool %s: input schema is not a JSON object: %v", t.Name, err)
	}
	if t.Handler == nil {
		return fmt.Errorf("tool %s: nil handler", t.Name)
	}
	return nil
}

// tools returns the registered tools sorted by name (list-tools must be stable).
func tools() []Tool {
	out := make([]Tool, 0, len(registry))
	for _, t := range registry {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// dispatch runs tool `name`. It returns either an output or a call error, never both. A panic in
// the handler, and an error that is not a *CallError, become `retryable`: the handler may have
// sent its write first (a refund, then a failure to read the answer), so an idempotent write is
// attempted again under the same key and a single-attempt write is recorded `outcome_unknown`,
// never `failed`. The instance is discarded after the call anyway.
func dispatch(name, args string, exec *Execution) (out Output, cerr *CallError) {
	t, ok := registry[name]
	if !ok {
		return Output{}, &CallError{Message: "unknown tool " + name}
	}
	defer func() {
		if r := recover(); r != nil {
			out, cerr = Output{}, &CallError{Message: fmt.Sprintf("tool %s panicked: %v", name, r), Retryable: true}
		}
	}()
	o, err := t.Handler(json.RawMessage(args), exec)
	if err != nil {
		var ce *CallError
		if errors.As(err, &ce) {
			return Output{}, ce
		}
		return Output{}, &CallError{Message: err.Error(), Retryable: true}
	}
	return o, nil
}
