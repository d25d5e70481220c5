package kubernetes

import (
	"log/slog"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Notifier = (*Events)(nil)

// Event rate limits: a storm of transitions (a scale-up of thousands, a
// mass deletion) produces at most this many Events, the rest are dropped
// (they are logged anyway). client-go's correlator adds its own per-Node
// spam filter and aggregation of similar Events, and its queue drops when
// full rather than blocking.
const (
	eventsPerSecond = 10
	eventsBurst     = 100
)

// Events implements ports.Notifier with Kubernetes Events on Nodes
// (kubectl describe node shows them). The API server accepts Events about
// cluster-scoped objects such as Nodes only in the "default" namespace
// (where kubelet records its own), so they are recorded there.
type Events struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	limiter     *rate.Limiter
	onDropped   func()
}

// EventsNamespace is where Events about Nodes are recorded.
const EventsNamespace = metav1.NamespaceDefault

// NewEvents starts recording Events as component nodesmith-lifecycle on
// host (this process's identity). onDropped, when set, is called for each
// notice dropped by the rate limit. Stop it with Stop.
func NewEvents(client kubernetes.Interface, host string, onDropped func(), log *slog.Logger) *Events {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events(EventsNamespace)})
	if log != nil {
		log.Debug("recording Kubernetes events on nodes", "namespace", EventsNamespace)
	}
	return &Events{
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: FieldManager, Host: host}),
		limiter:     rate.NewLimiter(eventsPerSecond, eventsBurst),
		onDropped:   onDropped,
	}
}

// Notify implements ports.Notifier: it never blocks.
func (e *Events) Notify(n ports.Notice) {
	if n.Node == "" {
		return
	}
	if !e.limiter.Allow() {
		if e.onDropped != nil {
			e.onDropped()
		}
		return
	}
	typ := corev1.EventTypeNormal
	if n.Warning {
		typ = corev1.EventTypeWarning
	}
	e.recorder.Event(NodeReference(n.Node), typ, n.Reason, n.Message)
}

// Stop stops recording (queued Events may be lost).
func (e *Events) Stop() { e.broadcaster.Shutdown() }

// NodeReference is the object reference of a Node in its Events. The UID is
// the Node's name, as kubelet sets it and kubectl describe node queries it.
func NodeReference(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: name, UID: types.UID(name)}
}
