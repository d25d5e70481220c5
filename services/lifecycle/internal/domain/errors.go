package domain

import (
	"errors"
	"fmt"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// Code classifies a domain error the way callers must react to it: the
// shared operation codes (contract.Code), numbered as gRPC status codes.
// Lifecycle produces InvalidArgument, NotFound, AlreadyExists,
// FailedPrecondition, OutOfRange, Aborted and Unavailable; Unknown is an
// error nobody classified.
type Code = contract.Code

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

// CodeOf returns err's code: OK for nil, the code of the first *Error in its
// chain, or Unknown.
func CodeOf(err error) Code {
	if err == nil {
		return contract.CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return contract.CodeUnknown
}

// ErrInvalidTransition is returned (wrapped) by Apply for an event that has
// no meaning in the instance's state.
var ErrInvalidTransition = errors.New("invalid transition")
