package tollgate

import "fmt"

// Log writes message to the host's log at level (LevelTrace … LevelError). The host bounds the
// length and the number of messages per call.
func Log(level uint32, message string) { logEmit(level, message) }

// Logf formats and logs at level.
func Logf(level uint32, format string, args ...any) { logEmit(level, fmt.Sprintf(format, args...)) }

// Config returns the value of key when the component's manifest grants that key and a value is
// set; ok is false otherwise.
func Config(key string) (value string, ok bool) { return configGet(key) }
