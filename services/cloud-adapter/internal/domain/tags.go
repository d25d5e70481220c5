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
