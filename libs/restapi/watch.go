package restapi

// GET /api/v1/watch streams the read model's changes as server-sent events
// (https://html.spec.whatwg.org/multipage/server-sent-events.html). Each
// event has an id (increasing per connection), a name and one line of
// JSON:
//
//	snapshot       WatchSnapshot: first, and again whenever the server
//	               dropped changes (a client too slow to keep up, state
//	               reloaded); it replaces everything the client held
//	group          Group: a group was created or changed, or its counts did
//	transition     TransitionEntry: an instance changed state
//	deleted-group  WatchDeletedGroup
//	bye            {}: the server is shutting down; reconnect elsewhere
//
// and a ": keepalive" comment every keepalive interval (15 s by default).

// Event names of the watch stream.
const (
	EventSnapshot     = "snapshot"
	EventGroup        = "group"
	EventTransition   = "transition"
	EventDeletedGroup = "deleted-group"
	EventBye          = "bye"
)

// WatchSnapshot is the data of a snapshot event.
type WatchSnapshot struct {
	Groups []Group `json:"groups"`
}

// WatchDeletedGroup is the data of a deleted-group event.
type WatchDeletedGroup struct {
	ID string `json:"id"`
}
