package contract

import (
	"net/http"
	"testing"
)

func TestCodeNamesAndStatuses(t *testing.T) {
	want := map[Code]int{
		CodeOK: http.StatusOK, CodeInvalidArgument: http.StatusBadRequest, CodeOutOfRange: http.StatusBadRequest,
		CodeUnauthenticated: http.StatusUnauthorized, CodePermissionDenied: http.StatusForbidden,
		CodeNotFound: http.StatusNotFound, CodeAlreadyExists: http.StatusConflict, CodeAborted: http.StatusConflict,
		CodeFailedPrecondition: http.StatusConflict, CodeResourceExhausted: http.StatusTooManyRequests,
		CodeCanceled: 499, CodeUnimplemented: http.StatusNotImplemented, CodeUnavailable: http.StatusServiceUnavailable,
		CodeDeadlineExceeded: http.StatusGatewayTimeout, CodeUnknown: http.StatusInternalServerError,
		CodeInternal: http.StatusInternalServerError, CodeDataLoss: http.StatusInternalServerError,
	}
	if len(want) != NumCodes {
		t.Fatalf("test covers %d codes, there are %d", len(want), NumCodes)
	}
	for c, status := range want {
		if got := c.HTTPStatus(); got != status {
			t.Errorf("%s.HTTPStatus() = %d, want %d", c, got, status)
		}
	}
	if got := Code(99).String(); got != "code_99" {
		t.Errorf("Code(99) is %q", got)
	}
	if got := Code(99).HTTPStatus(); got != http.StatusInternalServerError {
		t.Errorf("Code(99).HTTPStatus() = %d, want 500", got)
	}
}
