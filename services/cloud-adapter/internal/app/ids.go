package app

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// Event message ids. Each is derived from what makes the event unique, so a
// command handled twice publishes the same ids and JetStream drops the
// copies within its duplicate window. Ids only contain the characters of
// their parts and '.', which NATS accepts in Nats-Msg-Id.

func createdID(batch string, attempt uint32, chunk, chunks int) string {
	return withChunk("created."+batch+"."+u32(attempt), chunk, chunks)
}

// createdOnID is createdID of a chunk created on offering k of the
// command (each offering of a chunk its own event).
func createdOnID(batch string, attempt uint32, chunk, chunks, k int) string {
	return createdID(batch, attempt, chunk, chunks) + ".o" + strconv.Itoa(k)
}

// relaunchedID names the InstancesCreated of an instance created again on
// offering k after its VM failed to launch for capacity.
func relaunchedID(batch string, attempt uint32, instance string, k int) string {
	return "created." + batch + "." + u32(attempt) + ".relaunch." + instance + ".o" + strconv.Itoa(k)
}

func createFailedID(batch string, attempt uint32, chunk, chunks int) string {
	return withChunk("create_failed."+batch+"."+u32(attempt), chunk, chunks)
}

func observedID(instance string, attempt uint32, state domain.State) string {
	return "observed." + instance + "." + u32(attempt) + "." + stateToken(state)
}

// stateToken names a state in message ids: the wire enum's name without
// its CLOUD_STATE_ prefix, as the ids have always been.
func stateToken(s domain.State) string {
	switch s {
	case domain.StatePending, domain.StateRunning, domain.StateLaunchFailed, domain.StateStopped,
		domain.StateTerminating, domain.StateNotFound:
		return s.String()
	default:
		return "UNSPECIFIED"
	}
}

func terminatedID(refs []domain.InstanceRef) string { return "terminated." + refsDigest(refs) }

func terminateFailedID(refs []domain.InstanceRef) string {
	return "terminate_failed." + refsDigest(refs)
}

func inventoryID(requestID string) string {
	if requestID == "" {
		return "" // nothing to deduplicate on
	}
	return "inventory." + requestID
}

func withChunk(id string, chunk, chunks int) string {
	if chunks <= 1 {
		return id
	}
	return id + "." + strconv.Itoa(chunk)
}

// refsDigest names a set of instance refs independently of their order.
func refsDigest(refs []domain.InstanceRef) string {
	keys := make([]string, 0, len(refs))
	for _, r := range refs {
		keys = append(keys, r.InstanceID+"/"+u32(r.Attempt)+"/"+r.CloudID)
	}
	slices.Sort(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return hex.EncodeToString(sum[:12])
}

func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// batchAttempt is the attempt a batch's events carry: lifecycle forms a
// batch from instances of one attempt, and the highest is the safe choice
// if they ever differ.
func batchAttempt(refs []domain.InstanceRef) uint32 {
	var a uint32
	for _, r := range refs {
		a = max(a, r.Attempt)
	}
	return a
}

func taggedID(requestID string, checkOnly bool) string {
	if checkOnly {
		return "tag_checked." + requestID
	}
	return "tagged." + requestID
}
