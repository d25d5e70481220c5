// Package contract is the one home of the vocabulary the services share:
// names and numbers that must mean the same thing in every service. It is
// pure (standard library only); tests in the modules that hold the proto
// conversions pin it against the proto enums.
package contract
