package tollgate

import "fmt"

// Request is an outbound HTTP request for Fetch.
type Request struct {
	// Method is GET when empty.
	Method string
	// URL is absolute: http://host:port/path?query or https://…
	URL string
	// Header lists header fields in order; names may repeat.
	Header [][2]string
	Body   []byte
}

// Response is the answer to a Fetch. The whole body is read.
type Response struct {
	Status int
	Body   []byte
}

// HTTPError is a request that produced no response: wasi:http's error-code (Code is the case
// name, such as `HTTP-request-denied` when the host's allow-list refused the destination, or
// `connection-refused`), or a failure of the guest-side plumbing.
type HTTPError struct {
	Code    string
	Message string
}

func (e *HTTPError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Denied reports whether the host refused the request by policy (destination not allowed).
func (e *HTTPError) Denied() bool { return e.Code == "HTTP-request-denied" }

// Fetch sends req through wasi:http and waits for the whole response. The host lets the request
// through only when the component's manifest allows its destination. A non-2xx status is not an
// error: the caller decides.
func Fetch(req Request) (*Response, error) {
	if req.Method == "" {
		req.Method = "GET"
	}
	return fetch(req)
}

func httpErr(code string, format string, args ...any) *HTTPError {
	return &HTTPError{Code: code, Message: fmt.Sprintf(format, args...)}
}
