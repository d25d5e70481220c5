package domain

// Tag keys nodesmith puts on every VM it creates. The reconciler finds
// nodesmith's VMs by TagCluster and maps them back to records with the rest.
const (
	TagCluster  = "nodesmith:cluster"
	TagGroup    = "nodesmith:group"
	TagBatch    = "nodesmith:batch"
	TagInstance = "nodesmith:instance"
)

// TagPrefix is the prefix every nodesmith tag key starts with.
const TagPrefix = "nodesmith:"

// Tag is one key/value pair; a slice of them keeps a stable order.
type Tag struct{ Key, Value string }

// CreationTags returns the tags of the VMs of one create call. instanceID is
// set only when the call creates a single VM: with several VMs per call the
// cloud cannot tag each with its own instance id, and the batch tag plus the
// ordered id mapping identify them instead.
func CreationTags(clusterID, group, batchID, instanceID string) []Tag {
	tags := []Tag{
		{Key: TagCluster, Value: clusterID},
		{Key: TagGroup, Value: group},
		{Key: TagBatch, Value: batchID},
	}
	if instanceID != "" {
		tags = append(tags, Tag{Key: TagInstance, Value: instanceID})
	}
	return tags
}

// CodeNotInCluster is the error code of a terminate refused because the VM
// is not this cluster's (see MayTerminate).
const CodeNotInCluster = "InstanceNotInCluster"

// MayTerminate says whether a VM with these tags may be terminated on
// behalf of clusterID, and if not, why. A VM nodesmith created carries
// TagCluster = clusterID. An adopted VM (a Node that nodesmith did not
// create, adopted by a group) carries no nodesmith tag: it may be
// terminated as long as it carries no cluster tag at all, so a VM of
// another nodesmith cluster is never one. An empty clusterID allows
// nothing.
func MayTerminate(tags map[string]string, clusterID string, adopted bool) (bool, string) {
	if clusterID == "" {
		return false, "the terminate command names no cluster id"
	}
	got := tags[TagCluster]
	switch {
	case got == clusterID:
		return true, ""
	case got == "" && adopted:
		return true, ""
	case got == "":
		return false, "the VM has no " + TagCluster + " tag (not created by nodesmith, and not adopted)"
	default:
		return false, "the VM belongs to cluster " + got + " (tag " + TagCluster + ")"
	}
}

// AdoptionTags returns the tags of a VM nodesmith adopted (one it did not
// create): the cluster, its group and its instance, so the reconciler's
// inventory lists it and maps it back to its record.
func AdoptionTags(clusterID, group, instanceID string) []Tag {
	return []Tag{
		{Key: TagCluster, Value: clusterID},
		{Key: TagGroup, Value: group},
		{Key: TagInstance, Value: instanceID},
	}
}
