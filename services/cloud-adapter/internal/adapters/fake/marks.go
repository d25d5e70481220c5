package fake

import (
	"context"
	"sync"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

var _ ports.OfferingMarks = (*Marks)(nil)

// Marks is an in-memory ports.OfferingMarks with programmable Mark errors.
type Marks struct {
	mu    sync.Mutex
	marks map[markKey]domain.OfferingMark
	next  []error
	puts  int
}

type markKey struct {
	target                           domain.Target
	zone, instanceType, capacityType string
}

func keyOf(t domain.Target, o domain.Offering) markKey {
	return markKey{t, o.Zone, o.InstanceType, o.CapacityType}
}

// NewMarks returns marks holding none.
func NewMarks() *Marks { return &Marks{marks: map[markKey]domain.OfferingMark{}} }

// FailNext makes the next len(errs) Mark calls return errs in order (a nil
// entry lets that call through).
func (m *Marks) FailNext(errs ...error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next = append(m.next, errs...)
}

// Puts is how many marks were stored.
func (m *Marks) Puts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.puts
}

// All returns every stored mark.
func (m *Marks) All() []domain.OfferingMark {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]domain.OfferingMark, 0, len(m.marks))
	for _, mk := range m.marks {
		out = append(out, mk)
	}
	return out
}

// Unavailable implements ports.OfferingMarks.
func (m *Marks) Unavailable(t domain.Target, o domain.Offering) (domain.OfferingMark, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mk, ok := m.marks[keyOf(t, o)]
	return mk, ok
}

// Mark implements ports.OfferingMarks.
func (m *Marks) Mark(ctx context.Context, mark domain.OfferingMark) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.next) > 0 {
		err := m.next[0]
		m.next = m.next[1:]
		if err != nil {
			return err
		}
	}
	mark.Offering.SubnetID = ""
	m.marks[keyOf(mark.Target, mark.Offering)] = mark
	m.puts++
	return nil
}
