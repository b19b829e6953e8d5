//go:build wasip1

// Hand-written canonical-ABI glue for the part of wasi:http@0.2.12 (and wasi:io@0.2.12) that
// Fetch uses. Resource handles are i32. Layouts: layout.go, checked by witcheck_test.go.
package tollgate

import (
	"net/url"
	"strconv"
	"strings"
)

//go:wasmimport wasi:http/types@0.2.12 [static]fields.from-list
func httpFieldsFromList(ptr, n, ret uint32)

//go:wasmimport wasi:http/types@0.2.12 [resource-drop]fields
func httpFieldsDrop(h uint32)

//go:wasmimport wasi:http/types@0.2.12 [constructor]outgoing-request
func httpNewOutgoingRequest(fields uint32) uint32

//go:wasmimport wasi:http/types@0.2.12 [resource-drop]outgoing-request
func httpOutgoingRequestDrop(h uint32)

//go:wasmimport wasi:http/types@0.2.12 [method]outgoing-request.set-method
func httpSetMethod(req, disc, ptr, n uint32) uint32

//go:wasmimport wasi:http/types@0.2.12 [method]outgoing-request.set-scheme
func httpSetScheme(req, isSome, disc, ptr, n uint32) uint32

//go:wasmimport wasi:http/types@0.2.12 [method]outgoing-request.set-authority
func httpSetAuthority(req, isSome, ptr, n uint32) uint32

//go:wasmimport wasi:http/types@0.2.12 [method]outgoing-request.set-path-with-query
func httpSetPathWithQuery(req, isSome, ptr, n uint32) uint32

//go:wasmimport wasi:http/types@0.2.12 [method]outgoing-request.body
func httpOutgoingRequestBody(req, ret uint32)

//go:wasmimport wasi:http/types@0.2.12 [method]outgoing-body.write
func httpOutgoingBodyWrite(body, ret uint32)

//go:wasmimport wasi:http/types@0.2.12 [resource-drop]outgoing-body
func httpOutgoingBodyDrop(h uint32)

//go:wasmimport wasi:http/types@0.2.12 [static]outgoing-body.finish
func httpOutgoingBodyFinish(body, trailersIsSome, trailers, ret uint32)

//go:wasmimport wasi:http/outgoing-handler@0.2.12 handle
func httpHandle(req, optionsIsSome, options, ret uint32)

//go:wasmimport wasi:http/types@0.2.12 [method]future-incoming-response.subscribe
func httpFutureSubscribe(f uint32) uint32

//go:wasmimport wasi:http/types@0.2.12 [method]future-incoming-response.get
func httpFutureGet(f, ret uint32)

//go:wasmimport wasi:http/types@0.2.12 [resource-drop]future-incoming-response
func httpFutureDrop(h uint32)

//go:wasmimport wasi:http/types@0.2.12 [method]incoming-response.status
func httpResponseStatus(r uint32) uint32

//go:wasmimport wasi:http/types@0.2.12 [method]incoming-response.consume
func httpResponseConsume(r, ret uint32)

//go:wasmimport wasi:http/types@0.2.12 [resource-drop]incoming-response
func httpResponseDrop(h uint32)

//go:wasmimport wasi:http/types@0.2.12 [method]incoming-body.stream
func httpIncomingBodyStream(b, ret uint32)

//go:wasmimport wasi:http/types@0.2.12 [resource-drop]incoming-body
func httpIncomingBodyDrop(h uint32)

//go:wasmimport wasi:io/poll@0.2.12 [method]pollable.block
func ioPollableBlock(p uint32)

//go:wasmimport wasi:io/poll@0.2.12 [resource-drop]pollable
func ioPollableDrop(h uint32)

//go:wasmimport wasi:io/streams@0.2.12 [method]output-stream.blocking-write-and-flush
func ioBlockingWriteAndFlush(s, ptr, n, ret uint32)

//go:wasmimport wasi:io/streams@0.2.12 [resource-drop]output-stream
func ioOutputStreamDrop(h uint32)

//go:wasmimport wasi:io/streams@0.2.12 [method]input-stream.blocking-read
func ioBlockingRead(s uint32, n uint64, ret uint32)

//go:wasmimport wasi:io/streams@0.2.12 [resource-drop]input-stream
func ioInputStreamDrop(h uint32)

//go:wasmimport wasi:io/error@0.2.12 [resource-drop]error
func ioErrorDrop(h uint32)

var methods = map[string]uint32{
	"GET": methodGet, "HEAD": methodHead, "POST": methodPost, "PUT": methodPut,
	"DELETE": methodDelete, "CONNECT": methodConnect, "OPTIONS": methodOptions,
	"TRACE": methodTrace, "PATCH": methodPatch,
}

// errorCode decodes a wasi:http error-code at addr into an HTTPError.
func errorCode(addr uint32, during string) *HTTPError {
	disc := int(getU8(addr))
	code := "unknown-error-code"
	if disc < len(errorCodeNames) {
		code = errorCodeNames[disc]
	}
	msg := during
	// internal-error(option<string>): the only case whose text helps a reader.
	if code == "internal-error" && getU8(addr+8) == 1 {
		msg += ": " + loadString(getU32(addr+12), getU32(addr+16))
	}
	return &HTTPError{Code: code, Message: msg}
}

func fetch(req Request) (*Response, error) {
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, httpErr("HTTP-request-URI-invalid", "%v", err)
	}
	if u.Host == "" {
		return nil, httpErr("HTTP-request-URI-invalid", "URL %q has no host", req.URL)
	}

	// Headers: fields.from-list(list<tuple<field-name, field-value>>). A body goes with its
	// Content-Length (without one, the host would send it chunked).
	header := req.Header
	hasLength := false
	for _, h := range header {
		hasLength = hasLength || strings.EqualFold(h[0], "content-length")
	}
	if len(req.Body) > 0 && !hasLength {
		header = append(header[:len(header):len(header)], [2]string{"content-length", strconv.Itoa(len(req.Body))})
	}
	entries := allocPinned(&importPins, uint32(len(header))*fieldEntrySize+1, 4)
	for i, h := range header {
		e := entries + uint32(i)*fieldEntrySize
		p, n := stringArg(strings.ToLower(h[0]))
		putU32(e, p)
		putU32(e+4, n)
		p, n = bytesArg([]byte(h[1]))
		putU32(e+fieldEntryValueOff, p)
		putU32(e+fieldEntryValueOff+4, n)
	}
	ret := retArea()
	httpFieldsFromList(entries, uint32(len(header)), ret)
	importDone()
	if getU8(ret) != 0 {
		return nil, httpErr("HTTP-request-header-size", "invalid header field (header-error %d)", getU8(ret+resultHandleOff))
	}
	fields := getU32(ret + resultHandleOff)

	r := httpNewOutgoingRequest(fields)
	sent := false
	defer func() {
		if !sent {
			httpOutgoingRequestDrop(r)
		}
	}()
	method := strings.ToUpper(req.Method)
	var ok uint32
	if d, known := methods[method]; known {
		ok = httpSetMethod(r, d, 0, 0)
	} else {
		p, n := stringArg(method)
		ok = httpSetMethod(r, methodOther, p, n)
		importDone()
	}
	if ok != 0 {
		return nil, httpErr("HTTP-request-method-invalid", "method %q", req.Method)
	}
	switch u.Scheme {
	case "http":
		ok = httpSetScheme(r, 1, schemeHTTP, 0, 0)
	case "https":
		ok = httpSetScheme(r, 1, schemeHTTPS, 0, 0)
	default:
		p, n := stringArg(u.Scheme)
		ok = httpSetScheme(r, 1, schemeOther, p, n)
		importDone()
	}
	if ok != 0 {
		return nil, httpErr("HTTP-request-URI-invalid", "scheme %q", u.Scheme)
	}
	p, n := stringArg(u.Host)
	ok = httpSetAuthority(r, 1, p, n)
	importDone()
	if ok != 0 {
		return nil, httpErr("HTTP-request-URI-invalid", "authority %q", u.Host)
	}
	p, n = stringArg(u.RequestURI())
	ok = httpSetPathWithQuery(r, 1, p, n)
	importDone()
	if ok != 0 {
		return nil, httpErr("HTTP-request-URI-invalid", "path %q", u.RequestURI())
	}

	// The body handle must be taken before the request is handed to the handler; it is written and
	// finished afterwards, while the host already sends the request.
	ret = retArea()
	httpOutgoingRequestBody(r, ret)
	if getU8(ret) != 0 {
		return nil, httpErr("internal-error", "outgoing-request.body failed")
	}
	body := getU32(ret + resultHandleOff)

	ret = retArea()
	httpHandle(r, 0, 0, ret)
	sent = true
	if getU8(ret) != 0 {
		e := errorCode(ret+handleResultOff, "sending request")
		importDone()
		httpOutgoingBodyDrop(body)
		return nil, e
	}
	future := getU32(ret + handleResultOff)
	defer httpFutureDrop(future)

	// When the host refused the request, writing the body fails and the response future holds
	// the reason, which is what the caller needs to see: so wait for the future either way.
	writeErr := writeBody(body, req.Body)

	pollable := httpFutureSubscribe(future)
	for {
		ret = retArea()
		httpFutureGet(future, ret)
		if getU8(ret) == 1 {
			break
		}
		ioPollableBlock(pollable)
	}
	ioPollableDrop(pollable)
	if getU8(ret+futureGetOuterOff) != 0 {
		return nil, httpErr("internal-error", "response already taken")
	}
	if getU8(ret+futureGetInnerOff) != 0 {
		e := errorCode(ret+futureGetPayloadOff, "waiting for the response")
		importDone()
		return nil, e
	}
	if writeErr != nil {
		return nil, writeErr
	}
	resp := getU32(ret + futureGetPayloadOff)
	defer httpResponseDrop(resp)
	status := int(httpResponseStatus(resp))

	data, herr := readBody(resp)
	if herr != nil {
		return nil, herr
	}
	return &Response{Status: status, Body: data}, nil
}

func writeBody(body uint32, data []byte) *HTTPError {
	ret := retArea()
	httpOutgoingBodyWrite(body, ret)
	if getU8(ret) != 0 {
		httpOutgoingBodyDrop(body)
		return httpErr("internal-error", "outgoing-body.write failed")
	}
	stream := getU32(ret + resultHandleOff)
	for len(data) > 0 {
		chunk := data[:min(len(data), 4096)] // blocking-write-and-flush takes at most 4096 bytes
		data = data[len(chunk):]
		p, n := bytesArg(chunk)
		ret = retArea()
		ioBlockingWriteAndFlush(stream, p, n, ret)
		importDone()
		if getU8(ret) != 0 {
			if getU8(ret+streamResultOff) == streamErrorLastOperationFailed {
				ioErrorDrop(getU32(ret + streamResultOff + 4))
			}
			ioOutputStreamDrop(stream)
			httpOutgoingBodyDrop(body)
			return httpErr("HTTP-request-body-size", "writing the request body failed")
		}
	}
	ioOutputStreamDrop(stream)
	ret = retArea()
	httpOutgoingBodyFinish(body, 0, 0, ret)
	if getU8(ret) != 0 {
		e := errorCode(ret+resultErrorCodeOff, "finishing the request body")
		importDone()
		return e
	}
	return nil
}

func readBody(resp uint32) ([]byte, *HTTPError) {
	ret := retArea()
	httpResponseConsume(resp, ret)
	if getU8(ret) != 0 {
		return nil, httpErr("internal-error", "incoming-response.consume failed")
	}
	body := getU32(ret + resultHandleOff)
	defer httpIncomingBodyDrop(body)
	ret = retArea()
	httpIncomingBodyStream(body, ret)
	if getU8(ret) != 0 {
		return nil, httpErr("internal-error", "incoming-body.stream failed")
	}
	stream := getU32(ret + resultHandleOff)
	defer ioInputStreamDrop(stream)
	var out []byte
	for {
		ret = retArea()
		ioBlockingRead(stream, 64<<10, ret)
		if getU8(ret) != 0 {
			kind := getU8(ret + streamResultOff)
			importDone()
			if kind == streamErrorClosed {
				return out, nil
			}
			ioErrorDrop(getU32(ret + streamResultOff + 4))
			return nil, httpErr("HTTP-response-incomplete", "reading the response body failed")
		}
		out = append(out, mem(getU32(ret+streamResultOff), getU32(ret+streamResultOff+4))...)
		importDone()
		regrowArena()
	}
}
