package domain

import (
	"errors"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// Code classifies a domain error the way callers must react to it: the
// shared operation codes (contract.Code), numbered as gRPC status codes.
// Lifecycle produces InvalidArgument, NotFound, AlreadyExists,
// FailedPrecondition, OutOfRange, Aborted and Unavailable; Unknown is an
// error nobody classified.
type Code = contract.Code

// Error is a domain error with a code (libs/contract: the gateway's is the
// same type).
type Error = contract.Error

// Errorf returns an *Error with code c.
func Errorf(c Code, format string, args ...any) error { return contract.Errorf(c, format, args...) }

// CodeOf returns err's code: OK for nil, the code of the first *Error in its
// chain, DeadlineExceeded or Canceled for a context's errors, or Unknown.
func CodeOf(err error) Code { return contract.CodeOf(err) }

// ErrInvalidTransition is returned (wrapped) by Apply for an event that has
// no meaning in the instance's state.
var ErrInvalidTransition = errors.New("invalid transition")
