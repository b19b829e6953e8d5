package tollgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func reset() { registry = map[string]Tool{} }

type orderArgs struct {
	OrderID string `json:"order_id"`
}

func TestHandleDecodesArgumentsAndPassesTheExecution(t *testing.T) {
	reset()
	var got []string
	Register(Tool{Name: "t", Description: "d", InputSchema: `{"type":"object"}`,
		Handler: Handle(func(a orderArgs, exec *Execution) (Output, error) {
			key := "none"
			if exec != nil {
				key = exec.IdempotencyKey
			}
			got = append(got, a.OrderID+" "+key)
			return Text("ok"), nil
		})})
	if out, err := dispatch("t", `{"order_id":"7"}`, nil); err != nil || out.Content[0].Text != "ok" || out.IsError {
		t.Fatalf("dispatch: %+v %v", out, err)
	}
	dispatch("t", `{"order_id":"8"}`, &Execution{Attempt: 2, IdempotencyKey: "s/t/c"})
	if strings.Join(got, ",") != "7 none,8 s/t/c" {
		t.Fatalf("handler saw %v", got)
	}
	_, cerr := dispatch("t", `{"order_id":7}`, nil)
	if cerr == nil || cerr.Retryable || !strings.Contains(cerr.Message, "invalid arguments") {
		t.Fatalf("bad arguments gave %+v", cerr)
	}
}

func TestErrorsBecomeCallErrors(t *testing.T) {
	reset()
	fails := func(err error) Handler {
		return func(json.RawMessage, *Execution) (Output, error) { return Output{}, err }
	}
	Register(
		Tool{Name: "busy", Description: "d", InputSchema: `{}`, Handler: fails(Retryable("503 %d", 1))},
		Tool{Name: "gone", Description: "d", InputSchema: `{}`, Handler: fails(Failed("gone"))},
		Tool{Name: "plain", Description: "d", InputSchema: `{}`, Handler: fails(errors.New("disk on fire"))},
		Tool{Name: "panics", Description: "d", InputSchema: `{}`, Handler: func(json.RawMessage, *Execution) (Output, error) { panic("boom") }},
	)
	cases := []struct {
		tool      string
		retryable bool
		message   string
	}{
		{"busy", true, "503 1"},
		{"gone", false, "gone"},
		// An error the handler did not make a CallError, and a panic, may come after its write
		// took effect: retryable, never a definite failure.
		{"plain", true, "disk on fire"},
		{"panics", true, "tool panics panicked: boom"},
		{"missing", false, "unknown tool missing"},
	}
	for _, c := range cases {
		_, cerr := dispatch(c.tool, `{}`, nil)
		if cerr == nil || cerr.Retryable != c.retryable || cerr.Message != c.message {
			t.Errorf("%s: got %+v, want retryable=%v %q", c.tool, cerr, c.retryable, c.message)
		}
	}
}

func TestRegisterRefusesBadTools(t *testing.T) {
	bad := []Tool{
		{Name: "has space", Description: "d", InputSchema: `{}`, Handler: Handle(func(orderArgs, *Execution) (Output, error) { return Output{}, nil })},
		{Name: "schema", Description: "d", InputSchema: `[1]`, Handler: Handle(func(orderArgs, *Execution) (Output, error) { return Output{}, nil })},
		{Name: "nohandler", Description: "d", InputSchema: `{}`},
	}
	for _, tool := range bad {
		reset()
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s was accepted", tool.Name)
				}
			}()
			Register(tool)
		}()
	}
	reset()
	ok := Tool{Name: "a", Description: "d", InputSchema: `{}`, Handler: Handle(func(orderArgs, *Execution) (Output, error) { return Output{}, nil })}
	Register(ok)
	defer func() {
		if recover() == nil {
			t.Error("a duplicate was accepted")
		}
	}()
	Register(ok)
}

func TestToolsAreListedByName(t *testing.T) {
	reset()
	h := Handle(func(orderArgs, *Execution) (Output, error) { return Output{}, nil })
	Register(Tool{Name: "b", Description: "d", InputSchema: `{}`, Handler: h}, Tool{Name: "a", Description: "d", InputSchema: `{}`, Handler: h})
	if got := tools(); got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("tools() = %v", got)
	}
}

func TestSchemaOfDerivesTheInputSchemaFromTheStructAndItsTags(t *testing.T) {
	type line struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	type refund struct {
		OrderID     string            `json:"order_id" desc:"The order's id."`
		AmountCents int64             `json:"amount_cents"`
		Reason      *string           `json:"reason"`
		Speed       string            `json:"speed,omitempty" enum:"normal,express"`
		Lines       []line            `json:"lines,omitempty"`
		Ratio       float64           `json:"ratio,omitempty"`
		DryRun      bool              `json:"dry_run,omitempty"`
		Tags        map[string]string `json:"tags,omitempty"`
		Internal    string            `json:"-"`
		hidden      string
	}
	got := SchemaOf[refund]()
	want := `{"additionalProperties":false,"properties":{"amount_cents":{"type":"integer"},"dry_run":{"type":"boolean"},` +
		`"lines":{"items":{"additionalProperties":false,"properties":{"qty":{"type":"integer"},"sku":{"type":"string"}},"required":["sku","qty"],"type":"object"},"type":"array"},` +
		`"order_id":{"description":"The order's id.","type":"string"},"ratio":{"type":"number"},"reason":{"type":"string"},` +
		`"speed":{"enum":["normal","express"],"type":"string"},"tags":{"additionalProperties":{"type":"string"},"type":"object"}},` +
		`"required":["order_id","amount_cents"],"type":"object"}`
	if got != want {
		t.Fatalf("SchemaOf:\n got %s\nwant %s", got, want)
	}
	_ = refund{}.hidden
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "args.when: no JSON Schema for complex128") {
			t.Fatalf("a type with no schema: %v", r)
		}
	}()
	type odd struct {
		When complex128 `json:"when"`
	}
	SchemaOf[odd]()
}
