// Package jetstream connects the hook runner to NATS JetStream: the inbound
// handler that turns hookv1.RunHook commands into runs, and the publisher
// of hookv1.HookResult events.
package jetstream

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

// ResultSubject is where hook results are published.
const ResultSubject = messaging.SubjectHookResult

// decodeRunHook parses a command. An error means the message can never be
// processed (it is terminated, not retried); problems with the hook's
// content (empty host, bad environment) are left to validation, which
// reports them to lifecycle as a failed result.
func decodeRunHook(data []byte) (domain.Hook, error) {
	var m hookv1.RunHook
	if err := proto.Unmarshal(data, &m); err != nil {
		return domain.Hook{}, fmt.Errorf("decoding RunHook: %w", err)
	}
	if m.GetInstanceId() == "" {
		return domain.Hook{}, errors.New("RunHook without instance_id: no result could be addressed")
	}
	h := domain.Hook{
		InstanceID:    m.GetInstanceId(),
		Attempt:       m.GetAttempt(),
		Kind:          kindFromProto(m.GetHook()),
		Name:          m.GetHookName(),
		Group:         m.GetGroup(),
		Host:          m.GetHost(),
		Port:          int(m.GetPort()),
		Script:        m.GetScript(),
		Env:           maps.Clone(m.GetEnv()),
		RedactedEnv:   slices.Clone(m.GetRedactedEnv()),
		PinnedHostKey: m.GetPinnedHostKey(),
	}
	if t := m.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			h.Timeout = -1 // reported as invalid by validation
		} else {
			h.Timeout = t.AsDuration()
		}
	}
	return h, nil
}

func kindFromProto(k hookv1.HookKind) domain.Kind {
	switch k {
	case hookv1.HookKind_HOOK_KIND_AFTER_CREATED:
		return domain.KindAfterCreated
	case hookv1.HookKind_HOOK_KIND_BEFORE_DELETE:
		return domain.KindBeforeDelete
	default:
		return domain.KindUnspecified
	}
}

func kindToProto(k domain.Kind) hookv1.HookKind {
	switch k {
	case domain.KindAfterCreated:
		return hookv1.HookKind_HOOK_KIND_AFTER_CREATED
	case domain.KindBeforeDelete:
		return hookv1.HookKind_HOOK_KIND_BEFORE_DELETE
	default:
		return hookv1.HookKind_HOOK_KIND_UNSPECIFIED
	}
}

// encodeResult builds the event lifecycle consumes.
func encodeResult(r domain.Result) *hookv1.HookResult {
	return &hookv1.HookResult{
		InstanceId: r.InstanceID,
		Attempt:    r.Attempt,
		Hook:       kindToProto(r.Kind),
		Succeeded:  r.Succeeded,
		ExitCode:   int32(r.ExitCode),
		OutputTail: r.OutputTail,
		Error:      r.Error,
		Retryable:  r.Retryable,
		HostKey:    r.HostKey,
		StartedAt:  timestamp(r.StartedAt),
		FinishedAt: timestamp(r.FinishedAt),
		Runner:     r.Runner,
		Skipped:    r.Skipped,
	}
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// ResultMsgID is the result's Nats-Msg-Id: one per (instance, hook kind,
// attempt), so a re-run's result within the duplicate window is dropped by
// the stream and lifecycle sees each attempt's outcome once.
func ResultMsgID(r domain.Result) string {
	return "hookresult." + domain.Hook{InstanceID: r.InstanceID, Kind: r.Kind, Attempt: r.Attempt}.RunID()
}
