// Package domain holds the gateway's pure rules: how instance states are
// reported to Cluster Autoscaler, how autoscaling options are resolved, how
// prices are computed and which inputs are valid. It imports only the
// standard library.
package domain

import "github.com/nodesmith/nodesmith/libs/contract"

// Code classifies an error: the shared operation codes (contract.Code),
// numbered as gRPC status codes so lifecycle's Reply.error.code travels
// through unchanged.
type Code = contract.Code

// Error is an error with a Code (libs/contract: lifecycle's is the same
// type). Every error the application returns to an inbound adapter is (or
// wraps) an *Error; anything else is internal.
type Error = contract.Error

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) error {
	return contract.Errorf(code, format, args...)
}

// CodeOf returns the Code of err: the code of the *Error it wraps, OK for
// nil, DeadlineExceeded or Canceled for context errors, Unknown otherwise.
func CodeOf(err error) Code { return contract.CodeOf(err) }

// MessageOf returns the message of the *Error err wraps, or err's text.
func MessageOf(err error) string { return contract.MessageOf(err) }
