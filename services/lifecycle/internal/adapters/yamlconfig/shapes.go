package yamlconfig

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// offeringsAt is a template of the file with offerings, to check against
// the cloud's instance shapes once the cloud adapters can be asked.
type offeringsAt struct {
	// path is the template's field path ("instanceTemplates.web",
	// "nodeGroups[0].instanceTemplate").
	path      string
	name      string
	target    cloudshapes.Target
	offerings []cloudspec.Offering
}

// noteOfferings records a resolved template with offerings for
// CheckShapes.
func (c *checker) noteOfferings(p string, t domain.InstanceTemplate) {
	if len(t.Offerings) == 0 {
		return
	}
	c.offerings = append(c.offerings, offeringsAt{path: p, name: t.Name,
		target: cloudshapes.Target{Provider: t.Provider, Account: t.Account, Region: t.Region}, offerings: t.Offerings})
}

// CheckShapes checks the offerings of the file's templates against the
// cloud's instance shapes (issue 16: one shape per template, every type
// offered in its zone), asking each template at most timeout. A mixed or
// unoffered list is an *Error like the file's other problems. The check
// is best effort: a template that could not be checked (no cloud adapter
// answering yet, a cloud that cannot tell) is accepted and named in
// unchecked, for a warning; once no adapter answered, the remaining
// templates are not asked.
func (c *Config) CheckShapes(ctx context.Context, ask cloudshapes.Ask, timeout time.Duration) (unchecked []string, err error) {
	var problems []Problem
	var gone error // no adapter answered: ask no more
	for _, o := range c.offerings {
		var errs []cloudspec.FieldError
		why := gone
		if why == nil {
			actx, cancel := context.WithTimeout(ctx, timeout)
			errs, why = cloudshapes.Check(actx, ask, o.target, o.offerings)
			cancel()
			if why != nil && !errors.Is(why, cloudshapes.ErrNotSupported) {
				gone = why
			}
		}
		if why != nil {
			unchecked = append(unchecked, fmt.Sprintf("%s: instance template %q: %s", c.file, o.name, cloudshapes.Warning(why)))
			continue
		}
		for _, e := range errs {
			path := o.path + "." + e.Path
			line := 0
			if c.lineOf != nil {
				line = c.lineOf(path)
			}
			problems = append(problems, Problem{Path: path, Line: line, Msg: e.Msg})
		}
	}
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return unchecked, &Error{File: c.file, Problems: problems}
	}
	return unchecked, nil
}
