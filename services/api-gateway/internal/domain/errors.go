// Package domain holds the gateway's pure rules: how instance states are
// reported to Cluster Autoscaler, how autoscaling options are resolved, how
// prices are computed and which inputs are valid. It imports only the
// standard library.
package domain

import (
	"context"
	"errors"
	"fmt"
)

// Code classifies an error. The values are the canonical gRPC status codes
// (google.rpc.Code), so adapters translate them without a table and
// lifecycle's Reply.error.code travels through unchanged.
type Code uint32

// The codes the gateway produces or passes through.
const (
	CodeOK                 Code = 0
	CodeCanceled           Code = 1
	CodeUnknown            Code = 2
	CodeInvalidArgument    Code = 3
	CodeDeadlineExceeded   Code = 4
	CodeNotFound           Code = 5
	CodeAlreadyExists      Code = 6
	CodePermissionDenied   Code = 7
	CodeResourceExhausted  Code = 8
	CodeFailedPrecondition Code = 9
	CodeAborted            Code = 10
	CodeOutOfRange         Code = 11
	CodeUnimplemented      Code = 12
	CodeInternal           Code = 13
	CodeUnavailable        Code = 14
	CodeDataLoss           Code = 15
	CodeUnauthenticated    Code = 16
)

var codeNames = [...]string{
	"ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
	"already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
	"aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
	"unauthenticated",
}

// String is the lower snake name of the code ("not_found"), used in REST errors.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code_%d", uint32(c))
}

// Error is an error with a Code. Every error the application returns to an
// inbound adapter is (or wraps) an *Error; anything else is internal.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the Code of err: the code of the *Error it wraps, OK for
// nil, DeadlineExceeded or Canceled for context errors, Unknown otherwise.
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

// MessageOf returns the message of the *Error err wraps, or err's text.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}
