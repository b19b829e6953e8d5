// Command throwing is a test guest of writes that take effect and then panic:
// charge_then_throw, credit_then_throw (idempotent) and deposit_then_throw (idempotent) each POST
// {order_id, amount_cents, tool, attempt} to <PAYMENTS_URL>/refunds with the call's idempotency
// key, then read the answer as {"refund":{"id":…}}, which the stand-in payments service never
// sends: the nil refund is dereferenced, a panic the handler does not recover. The same guest
// exists in Rust (host/test-guests/throwing), JavaScript and Python.
package main

import (
	"encoding/json"
	"strings"

	"tollgate.invalid/tollgate"
)

type payment struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

type sent struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Tool        string `json:"tool"`
	Attempt     uint32 `json:"attempt"`
}

// answer is what these tools expect, not what they get.
type answer struct {
	Refund *struct {
		ID string `json:"id"`
	} `json:"refund"`
}

func payThenThrow(tool string) func(payment, *tollgate.Execution) (tollgate.Output, error) {
	return func(p payment, exec *tollgate.Execution) (tollgate.Output, error) {
		base, ok := tollgate.Config("PAYMENTS_URL")
		if !ok || base == "" {
			return tollgate.Output{}, tollgate.Failed("PAYMENTS_URL is not configured")
		}
		if exec == nil {
			return tollgate.Output{}, tollgate.Failed("%s must run as a deferred call", tool)
		}
		body, _ := json.Marshal(sent{p.OrderID, p.AmountCents, tool, exec.Attempt})
		resp, err := tollgate.Fetch(tollgate.Request{
			Method: "POST",
			URL:    strings.TrimRight(base, "/") + "/refunds",
			Header: [][2]string{{"Content-Type", "application/json"}, {"Idempotency-Key", exec.IdempotencyKey}},
			Body:   body,
		})
		if err != nil {
			return tollgate.Output{}, err
		}
		var a answer
		_ = json.Unmarshal(resp.Body, &a)
		return tollgate.Text(a.Refund.ID), nil
	}
}

const schema = `{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer","minimum":1}},"required":["order_id","amount_cents"],"additionalProperties":false}`

func init() {
	tollgate.Register(
		tollgate.Tool{Name: "charge_then_throw", Description: "Charges an order once, then fails reading the answer.",
			InputSchema: schema, Annotations: tollgate.Annotations{OpenWorld: true}, Handler: tollgate.Handle(payThenThrow("charge_then_throw"))},
		tollgate.Tool{Name: "credit_then_throw", Description: "Credits an order (idempotent under its key), then fails reading the answer.",
			InputSchema: schema, Annotations: tollgate.Annotations{Idempotent: true, OpenWorld: true}, Handler: tollgate.Handle(payThenThrow("credit_then_throw"))},
		tollgate.Tool{Name: "deposit_then_throw", Description: "Deposits to an order (idempotent under its key), then fails reading the answer.",
			InputSchema: schema, Annotations: tollgate.Annotations{Idempotent: true, OpenWorld: true}, Handler: tollgate.Handle(payThenThrow("deposit_then_throw"))},
	)
}

func main() {}
