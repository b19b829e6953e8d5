// Command orders is the `lookup_order` example tool (read-only), built as a component with
// guest-sdk/go/build.sh. The same tool exists in Rust, JavaScript and Python under examples/tools;
// all of them answer every call identically.
package main

import (
	"strconv"

	"tollgate.invalid/tollgate"
)

type lookupArgs struct {
	OrderID string `json:"order_id"`
}

// order is the answer, in this field order: {"order_id","status","total_cents","currency"}.
type order struct {
	OrderID    string `json:"order_id"`
	Status     string `json:"status"`
	TotalCents int    `json:"total_cents"`
	Currency   string `json:"currency"`
}

// knownOrder reports whether id is one of "1" … "99" (no sign, no leading zero) and its number.
func knownOrder(id string) (int, bool) {
	n, err := strconv.Atoi(id)
	if err != nil || n < 1 || n > 99 || strconv.Itoa(n) != id {
		return 0, false
	}
	return n, true
}

func lookupOrder(a lookupArgs, _ *tollgate.Execution) (tollgate.Output, error) {
	n, ok := knownOrder(a.OrderID)
	if !ok {
		return tollgate.ErrorText("order " + a.OrderID + " not found"), nil
	}
	return tollgate.JSON(order{OrderID: a.OrderID, Status: "delivered", TotalCents: 600 * n, Currency: "EUR"})
}

func init() {
	tollgate.Register(tollgate.Tool{
		Name:        "lookup_order",
		Description: "Look up an order by its id: status, total in cents and currency.",
		InputSchema: `{"type":"object","properties":{"order_id":{"type":"string","description":"The order id."}},"required":["order_id"],"additionalProperties":false}`,
		Annotations: tollgate.Annotations{ReadOnly: true, Idempotent: true},
		Handler:     tollgate.Handle(lookupOrder),
	})
}

func main() {}
