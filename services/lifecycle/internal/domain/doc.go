// Package domain is the core of the lifecycle service: node groups, instances
// and the instance state machine as pure functions of (record, event, time).
//
// It imports only the standard library. Nothing here performs I/O: the
// application layer (internal/app) loads records, calls Apply, persists the
// result with compare-and-set and publishes the command the new record is
// waiting on (see PendingCommand).
package domain
