package contract

// ErrorKind is the provider-neutral class of a cloud error. Values equal
// nodesmith.cloud.v1.ErrorKind; every cloud adapter maps its cloud's error
// codes to these in one place.
//
// Retry policy (one, for every service): only Throttled and Transient are
// retried. Every other kind, Unknown included, is definitive: the cloud
// answered and repeating the same request will not change the answer, or
// nobody knows what the answer means. An unclassified code is surfaced at
// once (to the operator and, for a create, to the Cluster Autoscaler as
// "other") rather than repeated: retrying a create we do not understand can
// only add spend, and a code seen in practice belongs in the adapter's table.
type ErrorKind int

// Error kinds. The zero value is ErrorKindUnknown.
const (
	// ErrorKindUnknown: a code no rule classifies (or an error that is not
	// the cloud's answer). Definitive: not retried.
	ErrorKindUnknown ErrorKind = iota
	// ErrorKindCapacity: out of capacity, quota or stock (CA's
	// OutOfResources class): retrying the same request soon will not help.
	ErrorKindCapacity
	// ErrorKindThrottled: the cloud's rate limit; retried with backoff.
	ErrorKindThrottled
	// ErrorKindNotFound: the resource does not exist (or no longer).
	ErrorKindNotFound
	// ErrorKindInvalidParameters: the request (usually the template) is wrong.
	ErrorKindInvalidParameters
	// ErrorKindAuth: missing, wrong or insufficient credentials.
	ErrorKindAuth
	// ErrorKindTransient: timeouts, 5xx, connection errors; retried.
	ErrorKindTransient
)

// ErrorKinds lists every kind, Unknown first, in value order.
var ErrorKinds = []ErrorKind{
	ErrorKindUnknown, ErrorKindCapacity, ErrorKindThrottled, ErrorKindNotFound,
	ErrorKindInvalidParameters, ErrorKindAuth, ErrorKindTransient,
}

var errorKindNames = [...]struct{ short, proto string }{
	ErrorKindUnknown:           {"unknown", "ERROR_KIND_UNSPECIFIED"},
	ErrorKindCapacity:          {"capacity", "ERROR_KIND_CAPACITY"},
	ErrorKindThrottled:         {"throttled", "ERROR_KIND_THROTTLED"},
	ErrorKindNotFound:          {"not_found", "ERROR_KIND_NOT_FOUND"},
	ErrorKindInvalidParameters: {"invalid_parameters", "ERROR_KIND_INVALID_PARAMETERS"},
	ErrorKindAuth:              {"auth", "ERROR_KIND_AUTH"},
	ErrorKindTransient:         {"transient", "ERROR_KIND_TRANSIENT"},
}

func (k ErrorKind) valid() bool { return k >= 0 && int(k) < len(errorKindNames) }

// String is the kind's short name ("capacity"); a value outside the enum is
// "unknown".
func (k ErrorKind) String() string {
	if !k.valid() {
		return errorKindNames[ErrorKindUnknown].short
	}
	return errorKindNames[k].short
}

// ProtoName is the kind's nodesmith.cloud.v1.ErrorKind value name; a value
// outside the enum is ERROR_KIND_UNSPECIFIED.
func (k ErrorKind) ProtoName() string {
	if !k.valid() {
		return errorKindNames[ErrorKindUnknown].proto
	}
	return errorKindNames[k].proto
}

// Retryable reports whether the same request may succeed if simply repeated
// later: Throttled and Transient only (see the policy on ErrorKind).
func (k ErrorKind) Retryable() bool {
	return k == ErrorKindThrottled || k == ErrorKindTransient
}
