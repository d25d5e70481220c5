package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
)

func newApplyCommand(env *Env) *cobra.Command {
	var files []string
	var dropWriteOnly bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE|-",
		Short: "Create or update node groups, instance templates, cloud accounts and hooks from YAML",
		Long: `apply reads YAML documents (several per file, separated by ---; JSON works
too), each

  kind: NodeGroup | InstanceTemplate | CloudAccount | Hook
  name: NAME
  metadata:
    resourceVersion: "42"   # optional
  spec: {...}               # the REST API's PUT body for the kind

and writes them, accounts first, then hooks, templates and groups.

A document with metadata.resourceVersion (as get -o yaml prints it) is
written only if the object is still at that version: if someone changed it
since it was read, apply refuses (exit code 4) and says so; get it again and
re-apply. A document without one creates the object, or replaces it at the
version read just before writing. The status of a document is ignored.

The API never returns write-only fields. Replacing a stored template with a
document that omits the parameters, secretParameters or hookEnv it holds
(as one made by get does), or a group with one that omits its unnamed
inline template's parameters or unnamed inline hooks, is refused unless
--drop-write-only.`,
		Example: `  nodesmithctl apply -f groups.yaml
  nodesmithctl get groups web -o yaml > web.yaml   # edit, then
  nodesmithctl apply -f web.yaml
  cat template.yaml | nodesmithctl apply -f -`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usagef(errors.New("-f FILE (or - for standard input) is required"))
			}
			var docs []applyDoc
			for _, f := range files {
				d, err := readDocuments(env.In, f)
				if err != nil {
					return err
				}
				docs = append(docs, d...)
			}
			if len(docs) == 0 {
				return usagef(errors.New("no documents to apply"))
			}
			for i := range docs {
				docs[i].dropWriteOnly = dropWriteOnly
			}
			c, err := env.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return applyDocuments(ctx, c, env.Out, docs)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "file to apply (- for standard input); repeatable")
	cmd.Flags().BoolVar(&dropWriteOnly, "drop-write-only", false, "replace templates and groups even if the document omits write-only parts they hold (template parameters, secretParameters, hookEnv; a group's unnamed inline template parameters and hooks)")
	return cmd
}

// applyDoc is one document to apply.
type applyDoc struct {
	Kind            client.Kind
	Name            string
	ResourceVersion string
	Spec            json.RawMessage
	source          string // file:index, for messages
	// dropWriteOnly allows replacing a template without the write-only
	// fields it holds.
	dropWriteOnly bool
}

// rawDoc is a document as written.
type rawDoc struct {
	APIVersion string          `json:"apiVersion,omitempty"`
	Kind       string          `json:"kind"`
	Name       string          `json:"name"`
	Metadata   *rawMetadata    `json:"metadata,omitempty"`
	Spec       json.RawMessage `json:"spec"`
	Status     json.RawMessage `json:"status,omitempty"`
	Items      []rawDoc        `json:"items,omitempty"` // kind: List
}

type rawMetadata struct {
	// ResourceVersion is a string, but YAML readers may write it unquoted.
	ResourceVersion json.RawMessage `json:"resourceVersion,omitempty"`
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// readDocuments reads the documents of file ("-": in).
func readDocuments(in io.Reader, file string) ([]applyDoc, error) {
	var b []byte
	var err error
	name := file
	if file == "-" {
		name = "<stdin>"
		b, err = io.ReadAll(io.LimitReader(in, 64<<20))
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	return parseDocuments(name, b)
}

func parseDocuments(name string, b []byte) ([]applyDoc, error) {
	var out []applyDoc
	for i, chunk := range docSeparator.Split(string(b), -1) {
		if strings.TrimSpace(stripComments(chunk)) == "" {
			continue
		}
		src := fmt.Sprintf("%s: document %d", name, i+1)
		j, err := yaml.YAMLToJSON([]byte(chunk))
		if err != nil {
			return nil, usagef(fmt.Errorf("%s: %w", src, err))
		}
		var raw rawDoc
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&raw); err != nil {
			return nil, usagef(fmt.Errorf("%s: %s (a document has kind, name, metadata.resourceVersion, spec and status)", src, strings.TrimPrefix(err.Error(), "json: ")))
		}
		items := []rawDoc{raw}
		if raw.Kind == "List" {
			items = raw.Items
		}
		for k, r := range items {
			isrc := src
			if raw.Kind == "List" {
				isrc = fmt.Sprintf("%s, item %d", src, k+1)
			}
			d, err := checkDoc(isrc, r)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// stripComments drops YAML comment lines (a file of comments only is no
// document).
func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func checkDoc(src string, r rawDoc) (applyDoc, error) {
	kind, ok := client.ParseKind(r.Kind)
	if !ok {
		return applyDoc{}, usagef(fmt.Errorf("%s: kind %q: want NodeGroup, InstanceTemplate, CloudAccount or Hook", src, r.Kind))
	}
	if strings.TrimSpace(r.Name) == "" {
		return applyDoc{}, usagef(fmt.Errorf("%s: name is required", src))
	}
	if len(r.Spec) == 0 || !bytes.HasPrefix(bytes.TrimSpace(r.Spec), []byte("{")) {
		return applyDoc{}, usagef(fmt.Errorf("%s (%s %s): spec is required and must be a mapping", src, kind, r.Name))
	}
	d := applyDoc{Kind: kind, Name: r.Name, Spec: r.Spec, source: src}
	if r.Metadata != nil && len(r.Metadata.ResourceVersion) > 0 {
		var rv any
		if err := json.Unmarshal(r.Metadata.ResourceVersion, &rv); err != nil {
			return applyDoc{}, usagef(fmt.Errorf("%s: metadata.resourceVersion: %w", src, err))
		}
		switch v := rv.(type) {
		case string:
			d.ResourceVersion = strings.TrimSpace(v)
		case float64:
			d.ResourceVersion = fmt.Sprintf("%.0f", v)
		case nil:
		default:
			return applyDoc{}, usagef(fmt.Errorf("%s: metadata.resourceVersion must be a string", src))
		}
	}
	return d, nil
}

// ConflictError is apply's answer to a write refused because the object
// changed since it was read (412), or appeared while apply created it
// (409). It matches client.ErrConflict.
type ConflictError struct {
	Kind       client.Kind
	Name       string
	ReadAt     string // the resourceVersion the write was based on
	Now        string // the current one ("" if it was deleted)
	Concurrent bool   // no resourceVersion in the document: changed while applying
	Created    bool   // creation found it created meanwhile
}

func (e *ConflictError) Error() string {
	obj := fmt.Sprintf("%s %q", e.Kind, e.Name)
	switch {
	case e.Created:
		return obj + " was created by someone else while apply created it: get it and re-apply"
	case e.Now == "":
		return fmt.Sprintf("%s was deleted since you read it (resourceVersion %s): get it again and re-apply", obj, e.ReadAt)
	case e.Concurrent:
		return fmt.Sprintf("%s was changed while apply wrote it (resourceVersion %s, now %s): re-apply", obj, e.ReadAt, e.Now)
	}
	return fmt.Sprintf("%s was changed since you read it (resourceVersion %s, now %s): get it again and re-apply", obj, e.ReadAt, e.Now)
}

// Is makes a ConflictError match client.ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == client.ErrConflict }

// applyDocuments writes docs, ordered by kind (what groups refer to
// first), each within client.DefaultTimeout, and reports each; it goes on
// after a failed document and returns every failure.
func applyDocuments(ctx context.Context, c *client.Client, out io.Writer, docs []applyDoc) error {
	slices.SortStableFunc(docs, func(a, b applyDoc) int {
		return slices.Index(client.Kinds, a.Kind) - slices.Index(client.Kinds, b.Kind)
	})
	var errs []error
	for _, d := range docs {
		dctx, cancel := context.WithTimeout(ctx, client.DefaultTimeout)
		verb, err := applyOne(dctx, c, d)
		cancel()
		if err != nil {
			var ce *ConflictError
			if !errors.As(err, &ce) {
				err = fmt.Errorf("%s %q (%s): %w", d.Kind, d.Name, d.source, err)
			}
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(out, "%s/%s %s\n", strings.ToLower(string(d.Kind)), d.Name, verb)
	}
	return errors.Join(errs...)
}

func applyOne(ctx context.Context, c *client.Client, d applyDoc) (string, error) {
	cond := client.Precondition{}
	concurrent := false
	readAt := d.ResourceVersion
	if readAt != "" {
		cond.IfMatch = client.ETag(readAt)
	} else {
		tag, found, err := c.ResourceETag(ctx, d.Kind, d.Name)
		if err != nil {
			return "", err
		}
		if found && tag != "" {
			cond.IfMatch, readAt, concurrent = tag, client.ResourceVersion(tag), true
		} else {
			cond.IfNoneMatch = true
		}
	}
	if !d.dropWriteOnly {
		if err := keepsWriteOnly(ctx, c, d); err != nil {
			return "", err
		}
	}
	res, err := c.Put(ctx, d.Kind, d.Name, d.Spec, cond)
	switch {
	case err == nil:
		what := "configured"
		if res.Created {
			what = "created"
		}
		for _, w := range res.Warnings {
			what += " (warning: " + w + ")"
		}
		return what, nil
	case client.PreconditionFailed(err):
		now, found, rerr := c.ResourceETag(ctx, d.Kind, d.Name)
		if rerr != nil {
			return "", errors.Join(err, rerr)
		}
		ce := &ConflictError{Kind: d.Kind, Name: d.Name, ReadAt: readAt, Concurrent: concurrent}
		if found {
			ce.Now = client.ResourceVersion(now)
		}
		if ce.Now == readAt && readAt != "" {
			// Not a newer version: the gateway refused the write for
			// another precondition (e.g. a group the configuration file
			// owns); its message says which.
			return "", err
		}
		return "", ce
	case cond.IfNoneMatch && errors.Is(err, client.ErrConflict) && isAlreadyExists(err):
		return "", &ConflictError{Kind: d.Kind, Name: d.Name, Created: true}
	case cond.IfMatch != "" && !concurrent && errors.Is(err, client.ErrNotFound):
		return "", &ConflictError{Kind: d.Kind, Name: d.Name, ReadAt: readAt}
	}
	return "", err
}

func isAlreadyExists(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Code == "already_exists"
}

// keepsWriteOnly refuses to replace a stored object whose write-only parts
// the document omits: the API never returns them, so a document made from
// get lacks them, and a PUT replaces the whole object. For templates:
// provider parameters, secret parameters, hook environment; for groups:
// an unnamed inline template's parameters and unnamed inline hooks (named
// ones get prints as references).
func keepsWriteOnly(ctx context.Context, c *client.Client, d applyDoc) error {
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(d.Spec, &spec); err != nil {
		return usagef(fmt.Errorf("%s: spec: %w", d.source, err))
	}
	var missing []string
	switch d.Kind {
	case client.KindInstanceTemplate:
		cur, _, err := c.GetTemplate(ctx, d.Name)
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range []struct {
			key    string
			stored bool
		}{{"parameters", cur.HasParameters}, {"secretParameters", len(cur.SecretParameters) > 0}, {"hookEnv", len(cur.HookEnv) > 0}} {
			if _, given := spec[f.key]; f.stored && !given {
				missing = append(missing, f.key)
			}
		}
	case client.KindNodeGroup:
		cur, _, err := c.GetGroup(ctx, d.Name)
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if t := cur.InstanceTemplate; t != nil && t.Name == "" {
			var it map[string]json.RawMessage
			_ = json.Unmarshal(spec["instanceTemplate"], &it)
			if _, given := it["parameters"]; !given {
				missing = append(missing, "instanceTemplate.parameters")
			}
		}
		var hooks map[string]json.RawMessage
		_ = json.Unmarshal(spec["hooks"], &hooks)
		for _, phase := range []string{"afterCreated", "beforeDelete"} {
			if h, ok := cur.Hooks[phase]; ok && h.Name == "" && h.HasScript {
				if _, given := hooks[phase]; !given {
					missing = append(missing, "hooks."+phase)
				}
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%s %q (%s): the stored object has %s, which the API never returns and this document omits: applying it would drop them. Give them in the spec (from your source file), or pass --drop-write-only",
		d.Kind, d.Name, d.source, strings.Join(missing, ", "))
}
