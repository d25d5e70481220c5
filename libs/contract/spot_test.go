package contract

import (
	"net/url"
	"strings"
	"testing"
)

func TestSpotNamesShareTheNodePrefix(t *testing.T) {
	for _, name := range []string{
		LabelCapacityType, TaintSpotInterruption, AnnotationSpotTerminationTime,
		AnnotationSpotNoticeSource, AnnotationSpotNoticeObservedAt,
	} {
		if !strings.HasPrefix(name, "nodesmith.io/") || len(name) > len("nodesmith.io/")+63 {
			t.Errorf("%q: want nodesmith.io/<name of at most 63 characters>", name)
		}
	}
}

func TestSpotSourcesHaveTerminationURLs(t *testing.T) {
	for _, s := range SpotSources {
		raw, ok := s.TerminationURL()
		if !ok {
			t.Errorf("%s: no URL", s)
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" || !strings.HasSuffix(u.Path, "/termination-time") {
			t.Errorf("%s: %q is not an http termination-time URL (%v)", s, raw, err)
		}
	}
	for _, s := range []SpotSource{SpotSourceURL, "aws", ""} {
		if raw, ok := s.TerminationURL(); ok {
			t.Errorf("%q: unexpected URL %q", s, raw)
		}
	}
}
