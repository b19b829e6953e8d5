package tollgate

// Checks the hand-written canonical-ABI glue against the WIT: the functions it exports and
// imports must have exactly the types in testdata/abi-contract.txt (the WIT the glue was written
// for, every type spelled out structurally), and every layout constant in layout.go must
// equal the canonical-ABI layout computed from the WIT. Needs wasm-tools on PATH
// (scripts/install-guest-toolchains.sh puts it in .tools/venv/bin).

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// glueFunctions are the functions abi_wasip1.go and http_wasip1.go export or import, as
// "<interface>#<function>". Keep in step with their //go:wasmexport and //go:wasmimport lines.
var glueFunctions = []string{
	"export tollgate:tool/tools@0.1.0#list-tools",
	"export tollgate:tool/tools@0.1.0#call",
	"import tollgate:tool/log@0.1.0#emit",
	"import tollgate:tool/config@0.1.0#get",
	"import wasi:http/types@0.2.12#[static]fields.from-list",
	"import wasi:http/types@0.2.12#[constructor]outgoing-request",
	"import wasi:http/types@0.2.12#[method]outgoing-request.set-method",
	"import wasi:http/types@0.2.12#[method]outgoing-request.set-scheme",
	"import wasi:http/types@0.2.12#[method]outgoing-request.set-authority",
	"import wasi:http/types@0.2.12#[method]outgoing-request.set-path-with-query",
	"import wasi:http/types@0.2.12#[method]outgoing-request.body",
	"import wasi:http/types@0.2.12#[method]outgoing-body.write",
	"import wasi:http/types@0.2.12#[static]outgoing-body.finish",
	"import wasi:http/outgoing-handler@0.2.12#handle",
	"import wasi:http/types@0.2.12#[method]future-incoming-response.subscribe",
	"import wasi:http/types@0.2.12#[method]future-incoming-response.get",
	"import wasi:http/types@0.2.12#[method]incoming-response.status",
	"import wasi:http/types@0.2.12#[method]incoming-response.consume",
	"import wasi:http/types@0.2.12#[method]incoming-body.stream",
	"import wasi:io/poll@0.2.12#[method]pollable.block",
	"import wasi:io/streams@0.2.12#[method]output-stream.blocking-write-and-flush",
	"import wasi:io/streams@0.2.12#[method]input-stream.blocking-read",
}

// ---- the WIT, as `wasm-tools component wit --json` resolves it ----

type witJSON struct {
	Worlds []struct {
		Name    string                     `json:"name"`
		Imports map[string]json.RawMessage `json:"imports"`
		Exports map[string]json.RawMessage `json:"exports"`
		Package int                        `json:"package"`
	} `json:"worlds"`
	Interfaces []struct {
		Name      string                 `json:"name"`
		Functions map[string]witFunction `json:"functions"`
		Types     map[string]int         `json:"types"`
		Package   int                    `json:"package"`
	} `json:"interfaces"`
	Types    []witType `json:"types"`
	Packages []struct {
		Name       string         `json:"name"`
		Interfaces map[string]int `json:"interfaces"`
	} `json:"packages"`
}

type witFunction struct {
	Name   string `json:"name"`
	Params []struct {
		Name string          `json:"name"`
		Type json.RawMessage `json:"type"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
}

type witType struct {
	Name *string         `json:"name"`
	Kind json.RawMessage `json:"kind"`
}

type wit struct {
	j witJSON
}

func loadWIT(t *testing.T) *wit {
	t.Helper()
	if _, err := exec.LookPath("wasm-tools"); err != nil {
		t.Fatalf("wasm-tools is not on PATH: run scripts/install-guest-toolchains.sh and add .tools/venv/bin to PATH")
	}
	out, err := exec.Command("wasm-tools", "component", "wit", "--json", "wit").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("wasm-tools component wit --json wit: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	w := &wit{}
	if err := json.Unmarshal(out, &w.j); err != nil {
		t.Fatal(err)
	}
	return w
}

// ref is a type reference: a primitive name or an index into Types.
func ref(raw json.RawMessage) (prim string, idx int, isPrim bool) {
	if err := json.Unmarshal(raw, &prim); err == nil {
		return prim, 0, true
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		panic(fmt.Sprintf("bad type reference %s", raw))
	}
	return "", idx, false
}

// kind decodes a type's kind: its single key and the raw value ("resource" has no value).
func (w *wit) kind(idx int) (string, json.RawMessage) {
	k := w.j.Types[idx].Kind
	var s string
	if json.Unmarshal(k, &s) == nil {
		return s, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(k, &m); err != nil {
		panic(err)
	}
	for key, v := range m {
		return key, v
	}
	panic("empty kind")
}

type field struct {
	Name string          `json:"name"`
	Type json.RawMessage `json:"type"`
}

func (w *wit) fields(v json.RawMessage) []field {
	var r struct {
		Fields []field `json:"fields"`
		Cases  []field `json:"cases"`
	}
	if err := json.Unmarshal(v, &r); err != nil {
		panic(err)
	}
	if r.Fields != nil {
		return r.Fields
	}
	return r.Cases
}

func (w *wit) name(idx int) string {
	if n := w.j.Types[idx].Name; n != nil {
		return *n
	}
	return ""
}

// str prints a type structurally: named records, variants and enums with their whole definition,
// resources by name.
func (w *wit) str(raw json.RawMessage) string {
	if raw == nil || string(raw) == "null" {
		return "_"
	}
	prim, idx, isPrim := ref(raw)
	if isPrim {
		return prim
	}
	k, v := w.kind(idx)
	switch k {
	case "type":
		return w.str(v)
	case "resource":
		return "resource " + w.name(idx)
	case "handle":
		var h map[string]json.RawMessage
		_ = json.Unmarshal(v, &h)
		for own, target := range h {
			_, ti, _ := ref(target)
			return own + "<" + w.resolveName(ti) + ">"
		}
	case "list", "option":
		return k + "<" + w.str(v) + ">"
	case "tuple":
		var r struct {
			Types []json.RawMessage `json:"types"`
		}
		_ = json.Unmarshal(v, &r)
		var parts []string
		for _, t := range r.Types {
			parts = append(parts, w.str(t))
		}
		return "tuple<" + strings.Join(parts, ", ") + ">"
	case "result":
		var r struct {
			Ok  json.RawMessage `json:"ok"`
			Err json.RawMessage `json:"err"`
		}
		_ = json.Unmarshal(v, &r)
		return "result<" + w.str(r.Ok) + ", " + w.str(r.Err) + ">"
	case "record":
		var parts []string
		for _, f := range w.fields(v) {
			parts = append(parts, f.Name+": "+w.str(f.Type))
		}
		return "record " + w.name(idx) + "{" + strings.Join(parts, ", ") + "}"
	case "variant":
		var parts []string
		for _, c := range w.fields(v) {
			if c.Type == nil || string(c.Type) == "null" {
				parts = append(parts, c.Name)
			} else {
				parts = append(parts, c.Name+"("+w.str(c.Type)+")")
			}
		}
		return "variant " + w.name(idx) + "{" + strings.Join(parts, ", ") + "}"
	case "enum", "flags":
		var parts []string
		for _, c := range w.fields(v) {
			parts = append(parts, c.Name)
		}
		return k + " " + w.name(idx) + "{" + strings.Join(parts, ", ") + "}"
	}
	panic("unsupported kind " + k)
}

// resolveName follows `type` aliases to a named type.
func (w *wit) resolveName(idx int) string {
	for {
		k, v := w.kind(idx)
		if k != "type" {
			return w.name(idx)
		}
		_, idx, _ = ref(v)
	}
}

// layout is a canonical-ABI size and alignment (wasm32).
type layout struct{ size, align int }

func alignTo(n, a int) int { return (n + a - 1) / a * a }

func (w *wit) layout(raw json.RawMessage) layout {
	if raw == nil || string(raw) == "null" {
		return layout{0, 1}
	}
	prim, idx, isPrim := ref(raw)
	if isPrim {
		switch prim {
		case "bool", "u8", "s8":
			return layout{1, 1}
		case "u16", "s16":
			return layout{2, 2}
		case "u32", "s32", "f32", "char":
			return layout{4, 4}
		case "u64", "s64", "f64":
			return layout{8, 8}
		case "string":
			return layout{8, 4}
		}
		panic("primitive " + prim)
	}
	k, v := w.kind(idx)
	switch k {
	case "type":
		return w.layout(v)
	case "handle":
		return layout{4, 4}
	case "list":
		return layout{8, 4}
	case "record":
		var ts []json.RawMessage
		for _, f := range w.fields(v) {
			ts = append(ts, f.Type)
		}
		return w.recordLayout(ts)
	case "tuple":
		var r struct {
			Types []json.RawMessage `json:"types"`
		}
		_ = json.Unmarshal(v, &r)
		return w.recordLayout(r.Types)
	case "option":
		return w.variantLayout([]json.RawMessage{nil, v})
	case "result":
		var r struct {
			Ok  json.RawMessage `json:"ok"`
			Err json.RawMessage `json:"err"`
		}
		_ = json.Unmarshal(v, &r)
		return w.variantLayout([]json.RawMessage{r.Ok, r.Err})
	case "variant":
		var ts []json.RawMessage
		for _, c := range w.fields(v) {
			ts = append(ts, c.Type)
		}
		return w.variantLayout(ts)
	case "enum":
		return w.variantLayout(make([]json.RawMessage, len(w.fields(v))))
	}
	panic("layout of kind " + k)
}

func (w *wit) recordLayout(ts []json.RawMessage) layout {
	size, align := 0, 1
	for _, t := range ts {
		l := w.layout(t)
		size = alignTo(size, l.align) + l.size
		align = max(align, l.align)
	}
	return layout{alignTo(size, align), align}
}

// payloadOffset is where a variant's payload starts.
func (w *wit) variantParts(ts []json.RawMessage) (disc, payloadOff, maxSize, align int) {
	switch {
	case len(ts) <= 1<<8:
		disc = 1
	case len(ts) <= 1<<16:
		disc = 2
	default:
		disc = 4
	}
	align = disc
	for _, t := range ts {
		l := w.layout(t)
		maxSize = max(maxSize, l.size)
		align = max(align, l.align)
	}
	return disc, alignTo(disc, align), maxSize, align
}

func (w *wit) variantLayout(ts []json.RawMessage) layout {
	_, off, maxSize, align := w.variantParts(ts)
	return layout{alignTo(off+maxSize, align), align}
}

// typeByName finds a named type owned by an interface ("wasi:http/types@0.2.12").
func (w *wit) typeByName(t *testing.T, iface, name string) json.RawMessage {
	t.Helper()
	for _, in := range w.j.Interfaces {
		if w.ifaceName(in.Name, in.Package) == iface {
			if idx, ok := in.Types[name]; ok {
				return json.RawMessage(fmt.Sprint(idx))
			}
		}
	}
	t.Fatalf("type %s not found in %s", name, iface)
	return nil
}

func (w *wit) ifaceName(name string, pkg int) string {
	p := w.j.Packages[pkg].Name // "ns:name@ver"
	at := strings.Index(p, "@")
	if at < 0 {
		return p + "/" + name
	}
	return p[:at] + "/" + name + p[at:]
}

func (w *wit) function(t *testing.T, qualified string) witFunction {
	t.Helper()
	iface, fn, _ := strings.Cut(qualified, "#")
	for _, in := range w.j.Interfaces {
		if w.ifaceName(in.Name, in.Package) == iface {
			if f, ok := in.Functions[fn]; ok {
				return f
			}
		}
	}
	t.Fatalf("function %s not found in the WIT", qualified)
	return witFunction{}
}

func (w *wit) signature(f witFunction) string {
	var ps []string
	for _, p := range f.Params {
		ps = append(ps, p.Name+": "+w.str(p.Type))
	}
	s := "func(" + strings.Join(ps, ", ") + ")"
	if f.Result != nil && string(f.Result) != "null" {
		s += " -> " + w.str(f.Result)
	}
	return s
}

// flatCount is the number of core values a type flattens to.
func (w *wit) flatCount(raw json.RawMessage) int {
	if raw == nil || string(raw) == "null" {
		return 0
	}
	prim, idx, isPrim := ref(raw)
	if isPrim {
		if prim == "string" {
			return 2
		}
		return 1
	}
	k, v := w.kind(idx)
	switch k {
	case "type":
		return w.flatCount(v)
	case "handle", "enum":
		return 1
	case "list":
		return 2
	case "record":
		n := 0
		for _, f := range w.fields(v) {
			n += w.flatCount(f.Type)
		}
		return n
	case "option":
		return 1 + w.flatCount(v)
	case "variant":
		n := 0
		for _, c := range w.fields(v) {
			n = max(n, w.flatCount(c.Type))
		}
		return 1 + n
	}
	panic("flatCount of " + k)
}

// ---- the checks ----

// The world the Go glue is built against must be tollgate:tool/tool-provider plus wasi:http, and
// deps/tollgate-tool must be the project's own wit/tool (a link, not a copy that could drift).
func TestWitDirectoryIsTheProjectsToolPackage(t *testing.T) {
	target, err := filepath.Abs("wit/deps/tollgate-tool")
	if err == nil {
		target, err = filepath.EvalSymlinks(target)
	}
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.Abs("../../wit/tool")
	if err != nil {
		t.Fatal(err)
	}
	want, _ = filepath.EvalSymlinks(want)
	if target != want {
		t.Fatalf("wit/deps/tollgate-tool resolves to %s, want %s", target, want)
	}
	w := loadWIT(t)
	found := false
	for _, p := range w.j.Packages {
		if p.Name == "tollgate:tool@0.1.0" {
			found = true
		}
	}
	if !found {
		t.Fatalf("package tollgate:tool@0.1.0 not in wit/: the glue implements exactly that version")
	}
}

func TestGlueFunctionsMatchTheWIT(t *testing.T) {
	w := loadWIT(t)
	var lines []string
	for _, g := range glueFunctions {
		dir, q, _ := strings.Cut(g, " ")
		lines = append(lines, dir+" "+q+": "+w.signature(w.function(t, q)))
	}
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	const golden = "testdata/abi-contract.txt"
	if os.Getenv("UPDATE_ABI_CONTRACT") != "" {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("the WIT no longer matches what the hand-written canonical ABI (abi_wasip1.go, "+
			"http_wasip1.go) was written for (%s).\nUpdate the glue and layout.go for the new WIT, then "+
			"refresh the contract with UPDATE_ABI_CONTRACT=1 go test.\n%s", golden, diffLines(string(want), got))
	}
}

func diffLines(want, got string) string {
	var b strings.Builder
	ws, gs := strings.Split(want, "\n"), strings.Split(got, "\n")
	in := func(s string, l []string) bool {
		for _, x := range l {
			if x == s {
				return true
			}
		}
		return false
	}
	for _, l := range ws {
		if !in(l, gs) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range gs {
		if !in(l, ws) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

func TestLayoutConstantsMatchTheWIT(t *testing.T) {
	w := loadWIT(t)
	types := func(n string) json.RawMessage { return w.typeByName(t, "tollgate:tool/types@0.1.0", n) }
	http := func(n string) json.RawMessage { return w.typeByName(t, "wasi:http/types@0.2.12", n) }
	io := func(n string) json.RawMessage { return w.typeByName(t, "wasi:io/streams@0.2.12", n) }

	offsets := func(raw json.RawMessage) map[string]int {
		_, idx, _ := ref(raw)
		for {
			k, v := w.kind(idx)
			if k == "type" {
				_, idx, _ = ref(v)
				continue
			}
			out := map[string]int{}
			off := 0
			for _, f := range w.fields(v) {
				l := w.layout(f.Type)
				off = alignTo(off, l.align)
				out[f.Name] = off
				off += l.size
			}
			return out
		}
	}
	caseIndex := func(raw json.RawMessage, name string) int {
		_, idx, _ := ref(raw)
		_, v := w.kind(idx)
		for i, c := range w.fields(v) {
			if c.Name == name {
				return i
			}
		}
		t.Fatalf("case %s not found", name)
		return -1
	}
	payloadOff := func(raws ...json.RawMessage) int {
		_, off, _, _ := w.variantParts(raws)
		return off
	}
	result := func(fn string) json.RawMessage { return w.function(t, fn).Result }
	// The payload types of a result/option value.
	resultArms := func(raw json.RawMessage) (json.RawMessage, json.RawMessage) {
		_, idx, _ := ref(raw)
		k, v := w.kind(idx)
		if k == "option" {
			return nil, v
		}
		var r struct {
			Ok  json.RawMessage `json:"ok"`
			Err json.RawMessage `json:"err"`
		}
		_ = json.Unmarshal(v, &r)
		return r.Ok, r.Err
	}

	spec := offsets(types("tool-spec"))
	annot := offsets(types("annotations"))
	image := offsets(types("image"))
	output := offsets(types("tool-output"))
	callRes := result("tollgate:tool/tools@0.1.0#call")
	okT, errT := resultArms(callRes)
	fromList := w.function(t, "wasi:http/types@0.2.12#[static]fields.from-list")
	var entryList struct {
		List json.RawMessage `json:"list"`
	}
	_, li, _ := ref(fromList.Params[0].Type)
	_ = json.Unmarshal(w.j.Types[li].Kind, &entryList)
	futureGet := result("wasi:http/types@0.2.12#[method]future-incoming-response.get")
	_, outer := resultArms(futureGet)
	innerOk, _ := resultArms(outer)
	inner, _ := resultArms(innerOk)
	_, innerErr := resultArms(innerOk)
	handleRes := result("wasi:http/outgoing-handler@0.2.12#handle")
	hOk, hErr := resultArms(handleRes)
	finishRes := result("wasi:http/types@0.2.12#[static]outgoing-body.finish")
	readRes := result("wasi:io/streams@0.2.12#[method]input-stream.blocking-read")
	rOk, rErr := resultArms(readRes)
	bodyRes := result("wasi:http/types@0.2.12#[method]outgoing-request.body")
	bOk, bErr := resultArms(bodyRes)
	call := w.function(t, "tollgate:tool/tools@0.1.0#call")
	callFlat := 0
	for _, p := range call.Params {
		callFlat += w.flatCount(p.Type)
	}
	var codeNames []string
	_, eci, _ := ref(http("error-code"))
	for eci >= 0 {
		k, v := w.kind(eci)
		if k == "type" {
			_, eci, _ = ref(v)
			continue
		}
		for _, c := range w.fields(v) {
			codeNames = append(codeNames, c.Name)
		}
		break
	}
	var levels []string
	_, lvl, _ := ref(w.typeByName(t, "tollgate:tool/log@0.1.0", "level"))
	_, lv := w.kind(lvl)
	for _, c := range w.fields(lv) {
		levels = append(levels, c.Name)
	}

	checks := []struct {
		what      string
		got, want int
	}{
		{"string size", w.layout(json.RawMessage(`"string"`)).size, stringSize},
		{"tool-spec size", w.layout(types("tool-spec")).size, toolSpecSize},
		{"tool-spec.name", spec["name"], toolSpecNameOff},
		{"tool-spec.description", spec["description"], toolSpecDescOff},
		{"tool-spec.input-schema", spec["input-schema"], toolSpecSchemaOff},
		{"tool-spec.annotations", spec["annotations"], toolSpecAnnotOff},
		{"annotations.read-only", annot["read-only"], annotReadOnlyOff},
		{"annotations.idempotent", annot["idempotent"], annotIdempotentOff},
		{"annotations.destructive", annot["destructive"], annotDestructiveOff},
		{"annotations.open-world", annot["open-world"], annotOpenWorldOff},
		{"content size", w.layout(types("content")).size, contentSize},
		{"content payload", payloadOff(json.RawMessage(`"string"`), types("image")), contentPayloadOff},
		{"content.text", caseIndex(types("content"), "text"), contentText},
		{"content.image", caseIndex(types("content"), "image"), contentImage},
		{"image.media-type", image["media-type"], imageMediaTypeOff},
		{"image.data", image["data"], imageDataOff},
		{"call result size", w.layout(callRes).size, callResultSize},
		{"call result payload", payloadOff(okT, errT), callResultPayloadOff},
		{"tool-output.content", output["content"], toolOutputContentOff},
		{"tool-output.is-error", output["is-error"], toolOutputIsErrorOff},
		{"call-error payload", payloadOff(json.RawMessage(`"string"`), json.RawMessage(`"string"`)), callErrorStringOff},
		{"call-error.failed", caseIndex(types("call-error"), "failed"), callErrorFailed},
		{"call-error.retryable", caseIndex(types("call-error"), "retryable"), callErrorRetryable},
		{"option<string> size", w.layout(result("tollgate:tool/config@0.1.0#get")).size, optionStringSize},
		{"option<string> payload", payloadOff(nil, json.RawMessage(`"string"`)), optionStringOff},
		{"call flat params", callFlat, callFlatParams},
		{"log level count", len(levels), int(LevelError) + 1},
		{"log level info", indexOf(levels, "info"), int(LevelInfo)},
		{"log level error", indexOf(levels, "error"), int(LevelError)},
		{"method.get", caseIndex(http("method"), "get"), methodGet},
		{"method.head", caseIndex(http("method"), "head"), methodHead},
		{"method.post", caseIndex(http("method"), "post"), methodPost},
		{"method.put", caseIndex(http("method"), "put"), methodPut},
		{"method.delete", caseIndex(http("method"), "delete"), methodDelete},
		{"method.connect", caseIndex(http("method"), "connect"), methodConnect},
		{"method.options", caseIndex(http("method"), "options"), methodOptions},
		{"method.trace", caseIndex(http("method"), "trace"), methodTrace},
		{"method.patch", caseIndex(http("method"), "patch"), methodPatch},
		{"method.other", caseIndex(http("method"), "other"), methodOther},
		{"scheme.HTTP", caseIndex(http("scheme"), "HTTP"), schemeHTTP},
		{"scheme.HTTPS", caseIndex(http("scheme"), "HTTPS"), schemeHTTPS},
		{"scheme.other", caseIndex(http("scheme"), "other"), schemeOther},
		{"fields entry size", w.layout(entryList.List).size, fieldEntrySize},
		{"fields entry value", payloadOffRecord(w, entryList.List, 1), fieldEntryValueOff},
		{"result<own<outgoing-body>> size", w.layout(bodyRes).size, resultHandleSize},
		{"result<own<outgoing-body>> payload", payloadOff(bOk, bErr), resultHandleOff},
		{"finish result size", w.layout(finishRes).size, resultErrorCodeSize},
		{"finish result payload", payloadOff(resultArms(finishRes)), resultErrorCodeOff},
		{"handle result size", w.layout(handleRes).size, handleResultSize},
		{"handle result payload", payloadOff(hOk, hErr), handleResultOff},
		{"error-code size", w.layout(http("error-code")).size, errorCodeSize},
		{"error-code internal-error payload", w.layoutPayloadOff(http("error-code")), 8},
		{"future get size", w.layout(futureGet).size, futureGetSize},
		{"future get outer", payloadOff(nil, outer), futureGetOuterOff},
		{"future get inner", futureGetOuterOff + payloadOff(innerOk, nil), futureGetInnerOff},
		{"future get payload", futureGetInnerOff + payloadOff(inner, innerErr), futureGetPayloadOff},
		{"stream result size", w.layout(readRes).size, streamResultSize},
		{"stream result payload", payloadOff(rOk, rErr), streamResultOff},
		{"stream-error.last-operation-failed", caseIndex(io("stream-error"), "last-operation-failed"), streamErrorLastOperationFailed},
		{"stream-error.closed", caseIndex(io("stream-error"), "closed"), streamErrorClosed},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: the WIT gives %d, layout.go has %d", c.what, c.got, c.want)
		}
	}
	if strings.Join(codeNames, ",") != strings.Join(errorCodeNames, ",") {
		t.Errorf("error-code cases differ from errorCodeNames:\n%s", diffLines(strings.Join(errorCodeNames, "\n"), strings.Join(codeNames, "\n")))
	}
	if levels[LevelTrace] != "trace" || levels[LevelDebug] != "debug" || levels[LevelWarn] != "warn" {
		t.Errorf("log levels are %v", levels)
	}
}

func indexOf(l []string, s string) int {
	for i, x := range l {
		if x == s {
			return i
		}
	}
	return -1
}

// payloadOffRecord is the offset of field i of a tuple type.
func payloadOffRecord(w *wit, raw json.RawMessage, i int) int {
	_, idx, _ := ref(raw)
	_, v := w.kind(idx)
	var r struct {
		Types []json.RawMessage `json:"types"`
	}
	_ = json.Unmarshal(v, &r)
	off := 0
	for j, t := range r.Types {
		l := w.layout(t)
		off = alignTo(off, l.align)
		if j == i {
			return off
		}
		off += l.size
	}
	return -1
}

// layoutPayloadOff is the payload offset of a named variant.
func (w *wit) layoutPayloadOff(raw json.RawMessage) int {
	_, idx, _ := ref(raw)
	for {
		k, v := w.kind(idx)
		if k == "type" {
			_, idx, _ = ref(v)
			continue
		}
		var ts []json.RawMessage
		for _, c := range w.fields(v) {
			ts = append(ts, c.Type)
		}
		_, off, _, _ := w.variantParts(ts)
		return off
	}
}

// Every //go:wasmexport and //go:wasmimport of the glue (other than cabi_* and resource drops,
// which carry no types) must be in glueFunctions, so the contract covers all of them.
func TestGlueFunctionsListIsComplete(t *testing.T) {
	var got []string
	for _, file := range []string{"abi_wasip1.go", "http_wasip1.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			switch {
			case strings.HasPrefix(line, "//go:wasmexport "):
				name := strings.TrimPrefix(line, "//go:wasmexport ")
				if !strings.HasPrefix(name, "cabi_") {
					got = append(got, "export "+name)
				}
			case strings.HasPrefix(line, "//go:wasmimport "):
				f := strings.Fields(strings.TrimPrefix(line, "//go:wasmimport "))
				if !strings.HasPrefix(f[1], "[resource-drop]") {
					got = append(got, "import "+f[0]+"#"+f[1])
				}
			}
		}
	}
	want := append([]string(nil), glueFunctions...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("glueFunctions is out of step with the //go:wasm* lines:\n%s",
			diffLines(strings.Join(want, "\n"), strings.Join(got, "\n")))
	}
}
