package contract

import (
	"context"
	"errors"
	"fmt"
)

// Error is an error with an operation Code: what lifecycle and the gateway
// return to their inbound adapters, which map the Code to a gRPC status or
// an HTTP answer (Code.GRPC, Code.HTTPStatus). Anything that is not (and
// does not wrap) an *Error is internal: CodeOf calls it Unknown.
type Error struct {
	Code Code
	// Msg says what failed, for the caller.
	Msg string
	// Err is the cause, if any (its text follows Msg).
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns err's code: OK for nil, the code of the first *Error in
// its chain, DeadlineExceeded or Canceled for a context's errors, Unknown
// otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	}
	return CodeUnknown
}

// MessageOf returns the text of the first *Error in err's chain (without
// the wrapping callers added), or err's text.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Error()
	}
	return err.Error()
}
