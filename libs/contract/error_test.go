package contract

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorCodeAndMessage(t *testing.T) {
	cause := errors.New("kv: timeout")
	tests := []struct {
		err  error
		code Code
		msg  string
	}{
		{nil, CodeOK, ""},
		{Errorf(CodeNotFound, "node group %q not found", "g"), CodeNotFound, `node group "g" not found`},
		{fmt.Errorf("op: %w", &Error{Code: CodeUnavailable, Msg: "instance i", Err: cause}), CodeUnavailable, "instance i: kv: timeout"},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), CodeDeadlineExceeded, "waiting: context deadline exceeded"},
		{context.Canceled, CodeCanceled, "context canceled"},
		{errors.New("boom"), CodeUnknown, "boom"},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.code {
			t.Errorf("CodeOf(%v) = %v, want %v", tt.err, got, tt.code)
		}
		if tt.err == nil {
			continue
		}
		if got := MessageOf(tt.err); got != tt.msg {
			t.Errorf("MessageOf(%v) = %q, want %q", tt.err, got, tt.msg)
		}
	}
	e := &Error{Code: CodeAborted, Msg: "x", Err: cause}
	if !errors.Is(e, cause) {
		t.Error("an *Error must unwrap to its cause")
	}
}
