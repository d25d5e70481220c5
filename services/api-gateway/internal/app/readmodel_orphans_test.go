package app

import (
	"context"
	"testing"
	"time"
)

// A bucket deleted and recreated (state lost) starts its revisions over:
// ResetBucket drops what the model held of it, revision included, so that
// the new bucket's records (at lower revisions) are applied rather than
// taken for replays, and read-your-writes waits for them.
func TestReadModelResetBucket(t *testing.T) {
	m := syncedModel()
	m.PutGroup("web", 1, testGroup("web", 0, 10, 3))
	for i, id := range []string{"i-1", "i-2", "i-3"} {
		m.PutInstance("web."+id, uint64(10+i), testInstance("web", id, stateRunning))
	}
	m.SetOrphanHold(2, &OrphanHold{Since: time.Now()})

	m.ResetBucket(BucketInstances)
	if st := m.Stats(); st.Instances != 0 || st.InstancesRev != 0 || st.Groups != 1 || st.GroupsRevision != 2 {
		t.Fatalf("after the reset: %+v", st)
	}
	if _, ok := m.InstanceForNode("", "i-1"); ok {
		t.Error("a lost instance still resolves")
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- m.WaitFor(ctx, 0, 1)
	}()
	m.PutInstance("web.i-new", 1, testInstance("web", "i-new", statePending))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Instance("i-new"); !ok {
		t.Error("the new bucket's record at revision 1 was not applied")
	}

	m.ResetBucket(BucketGroups)
	if _, ok := m.OrphanHold(); ok || len(m.Groups()) != 0 {
		t.Error("a groups reset kept the groups or the orphan hold")
	}
}
