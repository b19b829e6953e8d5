// Command {{name}} is the `{{name}}` tool. Build it into ../../tools/ with `tollgate build` in
// the agent's folder; try it with `tollgate tools call . {{name}} '{"text": "world"}'`.
package main

import "tollgate.invalid/tollgate"

// args are the tool's arguments: its input schema is derived from this struct and its tags.
type args struct {
	Text string `json:"text" desc:"Who or what to greet."`
}

func greet(a args, _ *tollgate.Execution) (tollgate.Output, error) {
	return tollgate.Text("hello, " + a.Text), nil
}

func init() {
	tollgate.Register(tollgate.Tool{
		Name:        "{{name}}",
		Description: "Greets: answers with the text it was given.",
		InputSchema: tollgate.SchemaOf[args](),
		Annotations: tollgate.Annotations{ReadOnly: true, Idempotent: true},
		Handler:     tollgate.Handle(greet),
	})
}

func main() {}
