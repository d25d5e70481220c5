package testwait_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/testwait"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	testwait.Until(t, 30*time.Second, "the third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// fatalRecorder records Fatalf and ends its goroutine like testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestUntilFailsNamingWhatItWaitedFor(t *testing.T) {
	f := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testwait.Until(f, time.Millisecond, "the impossible", func() bool { return false })
	}()
	<-done
	if want := "timed out after 1ms waiting for the impossible"; f.msg != want {
		t.Fatalf("failure message %q, want %q", f.msg, want)
	}
}
