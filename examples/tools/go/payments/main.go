// Command payments is the `create_refund` example tool (a non-idempotent write over outbound
// HTTP), built as a component with guest-sdk/go/build.sh. The same tool exists in Rust,
// JavaScript and Python under examples/tools; all of them answer every call identically.
//
// It needs the config key PAYMENTS_URL and outbound HTTP to that host, both granted by its
// manifest (payments.toml beside the component).
package main

import (
	"encoding/json"
	"errors"
	"strings"

	"tollgate.invalid/tollgate"
)

type refundArgs struct {
	OrderID     string  `json:"order_id"`
	AmountCents int64   `json:"amount_cents"`
	Reason      *string `json:"reason"`
}

// refundRequest is the body POSTed to <PAYMENTS_URL>/refunds, in this field order; a missing
// reason is sent as null.
type refundRequest struct {
	OrderID     string  `json:"order_id"`
	AmountCents int64   `json:"amount_cents"`
	Reason      *string `json:"reason"`
}

func createRefund(a refundArgs, exec *tollgate.Execution) (tollgate.Output, error) {
	base, ok := tollgate.Config("PAYMENTS_URL")
	if !ok || base == "" {
		return tollgate.Output{}, tollgate.Failed("PAYMENTS_URL is not configured")
	}
	if exec == nil {
		return tollgate.Output{}, tollgate.Failed("create_refund must run as a deferred call")
	}
	body, err := json.Marshal(refundRequest(a))
	if err != nil {
		return tollgate.Output{}, tollgate.Failed("encoding the refund: %v", err)
	}
	tollgate.Logf(tollgate.LevelInfo, "refund %s: %d cents, attempt %d", a.OrderID, a.AmountCents, exec.Attempt)
	resp, err := tollgate.Fetch(tollgate.Request{
		Method: "POST",
		URL:    strings.TrimRight(base, "/") + "/refunds",
		Header: [][2]string{
			{"Content-Type", "application/json"},
			{"Idempotency-Key", exec.IdempotencyKey},
		},
		Body: body,
	})
	if err != nil {
		// The texts name only the wasi:http error code, so that every language says the same.
		var herr *tollgate.HTTPError
		if !errors.As(err, &herr) {
			return tollgate.Output{}, tollgate.Failed("payments request failed: %v", err)
		}
		if herr.Denied() {
			return tollgate.Output{}, tollgate.Failed("outbound request denied: %s", herr.Code)
		}
		return tollgate.Output{}, tollgate.Retryable("payments service unreachable: %s", herr.Code)
	}
	switch {
	case resp.Status >= 200 && resp.Status < 300:
		return tollgate.Text(string(resp.Body)), nil
	case resp.Status >= 500:
		return tollgate.Output{}, tollgate.Retryable("payments service returned %d", resp.Status)
	case resp.Status >= 400:
		return tollgate.ErrorText("refund refused: " + string(resp.Body)), nil
	default:
		return tollgate.Output{}, tollgate.Failed("payments service returned %d", resp.Status)
	}
}

func init() {
	tollgate.Register(tollgate.Tool{
		Name:        "create_refund",
		Description: "Refund part or all of an order through the payments service. Not idempotent: runs once per call.",
		InputSchema: `{"type":"object","properties":{"order_id":{"type":"string","description":"The order id."},"amount_cents":{"type":"integer","minimum":1,"description":"Amount to refund, in cents."},"reason":{"type":"string","description":"Why the refund is made."}},"required":["order_id","amount_cents"],"additionalProperties":false}`,
		Annotations: tollgate.Annotations{OpenWorld: true},
		Handler:     tollgate.Handle(createRefund),
	})
}

func main() {}
