package lifecyclev1

// OpName names the operation a request carries as its oneof field does
// ("increase_size", "put_catalog_entry", ...), or "unknown" for none: a
// bounded label for metrics and span names that never falls behind the
// proto.
func OpName(req *Request) string {
	m := req.ProtoReflect()
	if f := m.WhichOneof(m.Descriptor().Oneofs().ByName("op")); f != nil {
		return string(f.Name())
	}
	return "unknown"
}
