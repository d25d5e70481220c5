package ports

import "context"

// Taint is a Kubernetes node taint.
type Taint struct {
	Key    string
	Value  string
	Effect string
}

// Node is what lifecycle needs to know about a Kubernetes Node.
type Node struct {
	Name       string
	ProviderID string
	// Ready is the status of the NodeReady condition.
	Ready       bool
	Labels      map[string]string
	Annotations map[string]string
	Taints      []Taint
	// InternalIP is the Node's first InternalIP address ("" if none); the
	// hooks of an adopted Node run there.
	InternalIP string
}

// NodeEventType says what happened to a Node.
type NodeEventType int

// Node event types.
const (
	NodeAdded NodeEventType = iota + 1
	NodeUpdated
	NodeDeleted
	// NodesSynced says every Node that existed when the watch started has
	// been delivered (as NodeAdded); its Node is empty. Only then can the
	// absence of a Node be trusted.
	NodesSynced
)

func (t NodeEventType) String() string {
	switch t {
	case NodeAdded:
		return "Added"
	case NodeUpdated:
		return "Updated"
	case NodeDeleted:
		return "Deleted"
	case NodesSynced:
		return "Synced"
	}
	return "Unknown"
}

// NodeEvent is one change to a Node. For NodeDeleted, Node is its last state.
type NodeEvent struct {
	Type NodeEventType
	Node Node
}

// Cluster is the Kubernetes cluster the instances join.
type Cluster interface {
	// Watch calls fn for every existing Node (as NodeAdded), then once with
	// NodesSynced, and then for every change, in order and never
	// concurrently, until ctx ends; it then returns ctx.Err() or nil. Any
	// other error means the watch broke: the caller calls Watch again
	// (which delivers the current Nodes as NodeAdded again). fn must not
	// block for long. An implementation that cannot tell when its initial
	// list is complete may omit NodesSynced: the first NodeUpdated or
	// NodeDeleted then stands for it (the order above implies the list was
	// delivered).
	Watch(ctx context.Context, fn func(NodeEvent)) error
	// PatchNode merges labels and annotations into the Node's and adds the
	// taints that are not present (by key and effect); it resolves write
	// conflicts itself. A missing Node is an error.
	PatchNode(ctx context.Context, name string, labels, annotations map[string]string, taints []Taint) error
	// DeleteNode deletes the Node object; a missing Node is success.
	DeleteNode(ctx context.Context, name string) error
}
