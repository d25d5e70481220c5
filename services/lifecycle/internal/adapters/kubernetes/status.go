package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.StatusSink = (*StatusConfigMap)(nil)

// StatusKey is the ConfigMap key holding the summary.
const StatusKey = "status.json"

// MaxStatusBytes bounds the summary: a ConfigMap takes 1 MiB, and the
// summary must stay cheap to write every few seconds and to read. Past it,
// recent errors are dropped first, then groups (the summary says how many).
const MaxStatusBytes = 100 << 10

// StatusConfigMap implements ports.StatusSink with a ConfigMap (by default
// nodegroup-status) holding a JSON summary under StatusKey.
type StatusConfigMap struct {
	client    kubernetes.Interface
	namespace string
	name      string
	identity  string
	now       func() time.Time
}

// NewStatusConfigMap writes the summary to ConfigMap namespace/name;
// identity names the writer (the leader) in the summary.
func NewStatusConfigMap(client kubernetes.Interface, namespace, name, identity string) *StatusConfigMap {
	return &StatusConfigMap{client: client, namespace: namespace, name: name, identity: identity, now: time.Now}
}

// statusDoc is the JSON document in the ConfigMap.
type statusDoc struct {
	Time     time.Time     `json:"time"`
	Leader   string        `json:"leader,omitempty"`
	Groups   []groupDoc    `json:"nodeGroups"`
	Omitted  int           `json:"omittedNodeGroups,omitempty"`
	Errors   []instanceErr `json:"recentErrors,omitempty"`
	Orphans  *orphansDoc   `json:"heldOrphans,omitempty"`
	Truncate string        `json:"truncated,omitempty"`
}

// orphansDoc is what the orphan reconciler holds back (omitted when
// nothing is held and no start-up hold is active).
type orphansDoc struct {
	Held      map[string]int `json:"count,omitempty"`
	HoldSince *time.Time     `json:"startupHoldSince,omitempty"`
	HoldUntil *time.Time     `json:"startupHoldUntil,omitempty"`
	Waiting   []string       `json:"awaitingRelease,omitempty"`
}

type groupDoc struct {
	ID             string         `json:"id"`
	Min            int            `json:"minSize"`
	Max            int            `json:"maxSize"`
	Target         int            `json:"targetSize"`
	Instances      map[string]int `json:"instances,omitempty"`
	CreationFailed int            `json:"creationFailed,omitempty"`
	NodeLost       int            `json:"nodeLost,omitempty"`
}

type instanceErr struct {
	Group    string    `json:"group"`
	Instance string    `json:"instance"`
	State    string    `json:"state"`
	Code     string    `json:"code"`
	Message  string    `json:"message"`
	At       time.Time `json:"at"`
}

// EncodeStatus renders the summary within MaxStatusBytes.
func EncodeStatus(s ports.Status, leader string, now time.Time) ([]byte, error) {
	doc := statusDoc{Time: now.UTC(), Leader: leader}
	for _, g := range s.Groups {
		doc.Groups = append(doc.Groups, groupDoc{ID: g.ID, Min: g.MinSize, Max: g.MaxSize, Target: g.TargetSize,
			Instances: g.Instances, CreationFailed: g.CreationFailed, NodeLost: g.NodeLost})
	}
	for _, e := range s.RecentErrors {
		doc.Errors = append(doc.Errors, instanceErr(e))
	}
	if o := s.Orphans; len(o.Held) > 0 || !o.HoldSince.IsZero() {
		doc.Orphans = &orphansDoc{Held: o.Held, Waiting: o.Waiting}
		if !o.HoldSince.IsZero() {
			since, until := o.HoldSince.UTC(), o.HoldUntil.UTC()
			doc.Orphans.HoldSince, doc.Orphans.HoldUntil = &since, &until
		}
	}
	for {
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("encoding the status: %w", err)
		}
		if len(b) <= MaxStatusBytes {
			return b, nil
		}
		switch {
		case len(doc.Errors) > 0:
			doc.Errors = doc.Errors[:len(doc.Errors)/2]
			doc.Truncate = "recent errors shortened to fit"
		case len(doc.Groups) > 1:
			keep := len(doc.Groups) * 3 / 4
			doc.Omitted += len(doc.Groups) - keep
			doc.Groups = doc.Groups[:keep]
			doc.Truncate = "node groups omitted to fit; the admin API lists them all"
		default:
			return nil, fmt.Errorf("the status does not fit in %d bytes", MaxStatusBytes)
		}
	}
}

// WriteStatus implements ports.StatusSink: it creates or updates the
// ConfigMap (with the resourceVersion read, retried on conflict), leaving
// its other keys, labels and annotations alone.
func (w *StatusConfigMap) WriteStatus(ctx context.Context, s ports.Status) error {
	data, err := EncodeStatus(s, w.identity, w.now())
	if err != nil {
		return err
	}
	cms := w.client.CoreV1().ConfigMaps(w.namespace)
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cm, err := cms.Get(ctx, w.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.namespace,
					Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager}},
				Data: map[string]string{StatusKey: string(data)},
			}, metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) {
				// Created meanwhile: update it on the next try.
				return apierrors.NewConflict(corev1.Resource("configmaps"), w.name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[StatusKey] = string(data)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", w.namespace, w.name, err)
	}
	return nil
}
