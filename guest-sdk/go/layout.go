package tollgate

// Canonical-ABI layouts (wasm32) that the hand-written glue in abi_wasip1.go and http_wasip1.go
// relies on. witcheck_test.go recomputes every constant here from the WIT (wit/, which links the
// project's wit/tool and the vendored wasi 0.2.12 packages) and fails when one differs, so a WIT
// change cannot silently break the glue. When it fails: update the glue, then these constants.
//
// Naming: <type><Field>Off is a byte offset inside <type>; <type>Size its size in bytes.
const (
	// string / list<T>: {ptr u32, len u32}.
	stringSize = 8

	// tollgate:tool/types.tool-spec
	toolSpecSize        = 28
	toolSpecNameOff     = 0
	toolSpecDescOff     = 8
	toolSpecSchemaOff   = 16
	toolSpecAnnotOff    = 24 // annotations: four bools, in this order:
	annotReadOnlyOff    = 0
	annotIdempotentOff  = 1
	annotDestructiveOff = 2
	annotOpenWorldOff   = 3

	// tollgate:tool/types.content (variant: 0 text(string), 1 image(image))
	contentSize       = 20
	contentPayloadOff = 4
	imageMediaTypeOff = 0 // inside the payload
	imageDataOff      = 8
	contentText       = 0
	contentImage      = 1

	// result<tool-output, call-error>: the return area of `call`.
	callResultSize       = 16
	callResultPayloadOff = 4
	toolOutputContentOff = 0 // inside the payload
	toolOutputIsErrorOff = 8
	callErrorStringOff   = 4 // call-error: disc u8 at 0, string at 4 (inside the payload)
	callErrorFailed      = 0
	callErrorRetryable   = 1

	// option<string>: the return area of config.get.
	optionStringSize = 12
	optionStringOff  = 4

	// The flattened `call` export takes 14 i32 parameters: name, arguments (ptr, len each), then
	// option<deferred-execution>: is-some, session-id, turn-id, tool-call-id (ptr, len each),
	// attempt, idempotency-key (ptr, len).
	callFlatParams = 14
)

// Log levels (tollgate:tool/log.level), in WIT order.
const (
	LevelTrace uint32 = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// wasi:http@0.2.12 and wasi:io@0.2.12 layouts used by Fetch.
const (
	// method variant cases (wasi:http/types.method).
	methodGet     = 0
	methodHead    = 1
	methodPost    = 2
	methodPut     = 3
	methodDelete  = 4
	methodConnect = 5
	methodOptions = 6
	methodTrace   = 7
	methodPatch   = 8
	methodOther   = 9
	// scheme variant cases.
	schemeHTTP  = 0
	schemeHTTPS = 1
	schemeOther = 2

	// tuple<field-name, field-value> in fields.from-list: {string, list<u8>}.
	fieldEntrySize     = 16
	fieldEntryValueOff = 8

	// result<own<handle>, E> with a small E (fields.from-list, outgoing-request.body,
	// outgoing-body.write, incoming-response.consume, incoming-body.stream): disc u8, handle at 4.
	resultHandleSize = 8
	resultHandleOff  = 4

	// result<_, error-code> (outgoing-body.finish): disc u8, error-code at 8.
	resultErrorCodeSize = 40
	resultErrorCodeOff  = 8
	// result<own<future-incoming-response>, error-code> (outgoing-handler.handle).
	handleResultSize = 40
	handleResultOff  = 8
	// error-code: disc u8 at 0 (the case index, see errorCodeNames).
	errorCodeSize = 32

	// option<result<result<own<incoming-response>, error-code>, _>> (future-incoming-response.get):
	// option disc at 0, outer result disc at 8, inner result disc at 16, handle or error-code at 24.
	futureGetSize       = 56
	futureGetOuterOff   = 8
	futureGetInnerOff   = 16
	futureGetPayloadOff = 24

	// result<list<u8>, stream-error> (input-stream.blocking-read) and result<_, stream-error>
	// (output-stream.blocking-write-and-flush): disc u8, list or stream-error at 4.
	streamResultSize               = 12
	streamResultOff                = 4
	streamErrorLastOperationFailed = 0
	streamErrorClosed              = 1
)

// errorCodeNames are the cases of wasi:http/types.error-code, in WIT order.
var errorCodeNames = []string{
	"DNS-timeout", "DNS-error", "destination-not-found", "destination-unavailable",
	"destination-IP-prohibited", "destination-IP-unroutable", "connection-refused",
	"connection-terminated", "connection-timeout", "connection-read-timeout",
	"connection-write-timeout", "connection-limit-reached", "TLS-protocol-error",
	"TLS-certificate-error", "TLS-alert-received", "HTTP-request-denied",
	"HTTP-request-length-required", "HTTP-request-body-size", "HTTP-request-method-invalid",
	"HTTP-request-URI-invalid", "HTTP-request-URI-too-long", "HTTP-request-header-section-size",
	"HTTP-request-header-size", "HTTP-request-trailer-section-size", "HTTP-request-trailer-size",
	"HTTP-response-incomplete", "HTTP-response-header-section-size", "HTTP-response-header-size",
	"HTTP-response-body-size", "HTTP-response-trailer-section-size", "HTTP-response-trailer-size",
	"HTTP-response-transfer-coding", "HTTP-response-content-coding", "HTTP-response-timeout",
	"HTTP-upgrade-failed", "HTTP-protocol-error", "loop-detected", "configuration-error",
	"internal-error",
}
