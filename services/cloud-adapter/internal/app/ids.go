package app

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
)

// Event message ids. Each is derived from what makes the event unique, so a
// command handled twice publishes the same ids and JetStream drops the
// copies within its duplicate window. Ids only contain the characters of
// their parts and '.', which NATS accepts in Nats-Msg-Id.

func createdID(batch string, attempt uint32, chunk, chunks int) string {
	return withChunk("created."+batch+"."+u32(attempt), chunk, chunks)
}

func createFailedID(batch string, attempt uint32, chunk, chunks int) string {
	return withChunk("create_failed."+batch+"."+u32(attempt), chunk, chunks)
}

func observedID(instance string, attempt uint32, state cloudv1.CloudState) string {
	return "observed." + instance + "." + u32(attempt) + "." + strings.TrimPrefix(state.String(), "CLOUD_STATE_")
}

func terminatedID(refs []*cloudv1.InstanceRef) string { return "terminated." + refsDigest(refs) }

func terminateFailedID(refs []*cloudv1.InstanceRef) string {
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
func refsDigest(refs []*cloudv1.InstanceRef) string {
	keys := make([]string, 0, len(refs))
	for _, r := range refs {
		keys = append(keys, r.GetInstanceId()+"/"+u32(r.GetAttempt())+"/"+r.GetCloudId())
	}
	slices.Sort(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return hex.EncodeToString(sum[:12])
}

func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// batchAttempt is the attempt a batch's events carry: lifecycle forms a
// batch from instances of one attempt, and the highest is the safe choice
// if they ever differ.
func batchAttempt(refs []*cloudv1.InstanceRef) uint32 {
	var a uint32
	for _, r := range refs {
		a = max(a, r.GetAttempt())
	}
	return a
}

func taggedID(requestID string, checkOnly bool) string {
	if checkOnly {
		return "tag_checked." + requestID
	}
	return "tagged." + requestID
}
