package intern

import (
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestString(t *testing.T) {
	a := strings.Repeat("x", 3) + "reason"
	b := strings.Repeat("x", 3) + "reason"
	if unsafe.StringData(a) == unsafe.StringData(b) {
		t.Fatal("test needs two copies")
	}
	ia, ib := String(a), String(b)
	if ia != a || ib != b {
		t.Fatalf("String changed the value: %q %q", ia, ib)
	}
	if unsafe.StringData(ia) != unsafe.StringData(ib) {
		t.Error("equal strings do not share their bytes")
	}
	if String("") != "" {
		t.Error(`String("") != ""`)
	}
}

func TestPack(t *testing.T) {
	id, cloud, empty, node, ip := "grp-abcdefghij", "ins-0001", "", "grp-abcdefghij", "10.0.0.1"
	want := []string{id, cloud, empty, node, ip}
	Pack(&id, &cloud, &empty, &node, &ip)
	for i, got := range []string{id, cloud, empty, node, ip} {
		if got != want[i] {
			t.Errorf("field %d = %q, want %q", i, got, want[i])
		}
	}
	if unsafe.StringData(node) != unsafe.StringData(id) {
		t.Error("an equal string does not share the earlier one's copy")
	}
	// One block: the fields follow each other, duplicates not repeated.
	base := uintptr(unsafe.Pointer(unsafe.StringData(id)))
	if got := uintptr(unsafe.Pointer(unsafe.StringData(cloud))); got != base+uintptr(len(id)) {
		t.Errorf("cloud at +%d, want +%d", got-base, len(id))
	}
	if got := uintptr(unsafe.Pointer(unsafe.StringData(ip))); got != base+uintptr(len(id)+len(cloud)) {
		t.Errorf("ip at +%d, want +%d", got-base, len(id)+len(cloud))
	}
	var none string
	Pack(&none)
	if none != "" {
		t.Errorf("empty = %q", none)
	}
}

func TestPackMany(t *testing.T) {
	vals := make([]string, 20)
	ps := make([]*string, len(vals))
	for i := range vals {
		vals[i] = strings.Repeat(string(rune('a'+i)), i)
		ps[i] = &vals[i]
	}
	Pack(ps...)
	for i, v := range vals {
		if v != strings.Repeat(string(rune('a'+i)), i) {
			t.Errorf("field %d = %q", i, v)
		}
	}
}

// TestPackAllocs pins Pack to one allocation, the block, whatever the
// number of strings (up to 16 without a second one).
func TestPackAllocs(t *testing.T) {
	a, b, c := "aaaaaaaaaaaaaaaa", "bbbbbbbb", "aaaaaaaaaaaaaaaa"
	got := testing.AllocsPerRun(100, func() {
		x, y, z := a, b, c
		Pack(&x, &y, &z)
	})
	if got != 1 {
		t.Errorf("Pack allocates %v times, want 1", got)
	}
}

func TestTimeKeepsNanosecondsAndTheZeroTime(t *testing.T) {
	if got := TimeOf(time.Time{}); got != 0 || !got.Time().IsZero() {
		t.Fatalf("zero time -> %d -> %v, want 0 and the zero time", got, got.Time())
	}
	at := time.Date(2026, 11, 26, 9, 30, 0, 123456789, time.FixedZone("UTC+8", 8*3600))
	if got := TimeOf(at).Time(); !got.Equal(at) || got.Location() != time.UTC {
		t.Fatalf("%v -> %v, want the same instant in UTC", at, got)
	}
}
