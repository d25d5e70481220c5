package domain

import (
	"errors"
	"fmt"
)

// Code classifies a domain error the way callers must react to it. The
// lifecycle ops adapter maps each code to the gRPC code of the same name.
type Code int

// Error codes.
const (
	CodeUnknown Code = iota
	// CodeInvalidArgument: the request itself is wrong (bad delta, node of
	// another group).
	CodeInvalidArgument
	// CodeNotFound: the group, instance or node does not exist.
	CodeNotFound
	// CodeAlreadyExists: creating something that exists.
	CodeAlreadyExists
	// CodeFailedPrecondition: the request is valid but the current state does
	// not allow it (not enough unregistered capacity, group not empty).
	CodeFailedPrecondition
	// CodeOutOfRange: the result would leave [minSize, maxSize].
	CodeOutOfRange
	// CodeAborted: a concurrent write won; retrying the call may succeed.
	CodeAborted
	// CodeUnavailable: storage or messaging is down; retry later.
	CodeUnavailable
)

func (c Code) String() string {
	switch c {
	case CodeInvalidArgument:
		return "InvalidArgument"
	case CodeNotFound:
		return "NotFound"
	case CodeAlreadyExists:
		return "AlreadyExists"
	case CodeFailedPrecondition:
		return "FailedPrecondition"
	case CodeOutOfRange:
		return "OutOfRange"
	case CodeAborted:
		return "Aborted"
	case CodeUnavailable:
		return "Unavailable"
	}
	return "Unknown"
}

// Error is a domain error with a code.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code c.
func Errorf(c Code, format string, args ...any) error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns err's code: the code of the first *Error in its chain, or
// CodeUnknown.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnknown
}

// ErrInvalidTransition is returned (wrapped) by Apply for an event that has
// no meaning in the instance's state.
var ErrInvalidTransition = errors.New("invalid transition")
