package opcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// The declarations: `leasehold tasks` and `leasehold policies`, each with
// list, show NAME, declare NAME and remove NAME, on the catalogue the
// Terraform provider writes. The operator writes as leasecore's operator
// (managed_by operator); what Terraform manages is refused (77) unless
// --take-over, for a declaration removed from the Terraform state.

// catalogGroups are the verbs that take a subcommand.
var catalogGroups = map[string]bool{"tasks": true, "policies": true}

// subcommand splits `tasks list …` into the verb "tasks list" and its
// arguments; ok is false when verb takes no subcommand. A missing or unknown
// subcommand is left to register, which refuses it.
func subcommand(verb string, args []string) (string, []string, bool) {
	if !catalogGroups[verb] {
		return verb, args, false
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return verb, args, true
	}
	return verb + " " + args[0], args[1:], true
}

// catalogFlags are the flags of the declaring verbs.
type catalogFlags struct {
	maxTTL      time.Duration
	policy      string
	description string
	keepFor     time.Duration
	keepLast    int64
	takeOver    bool
}

// registerCatalog defines the flags of a catalog verb, as register does.
func (v *verbFlags) registerCatalog(verb string, fs *flag.FlagSet) (func(context.Context, backend, *options, *verbFlags) error, bool, bool) {
	takeOver := func() {
		fs.BoolVar(&v.cat.takeOver, "take-over", false, "change or remove it although Terraform manages it, making it the operator's "+
			"(after terraform state rm; otherwise the next terraform apply takes it back)")
	}
	switch verb {
	case "tasks list":
		return runTasksList, false, true
	case "tasks show":
		return runTasksShow, true, true
	case "tasks declare":
		fs.DurationVar(&v.ttl, "ttl", 0, "the ttl of a claim that gives none, 100ms to 24h (required)")
		fs.DurationVar(&v.cat.maxTTL, "max-ttl", 0, "the longest `ttl` a claim or renewal may ask for (default: no bound but 24h)")
		fs.DurationVar(&v.minHold, "min-hold", 0, "the minimum hold of a claim that asks for none, up to 744h: a job run once per period declares one (default: none)")
		fs.StringVar(&v.cat.policy, "policy", "", "the retention `policy` of its history (default: default)")
		fs.StringVar(&v.cat.description, "description", "", "free `text` for people, at most 1024 bytes")
		takeOver()
		return runTasksDeclare, true, true
	case "tasks remove":
		takeOver()
		return runTasksRemove, true, true
	case "policies list":
		return runPoliciesList, false, true
	case "policies show":
		return runPoliciesShow, true, true
	case "policies declare":
		fs.DurationVar(&v.cat.keepFor, "keep-for", 0, "delete events older than this `duration`, whole seconds (default 0: no age limit)")
		fs.Int64Var(&v.cat.keepLast, "keep-last", 0, "keep each task's newest `N` events (default 0: no count limit)")
		takeOver()
		return runPoliciesDeclare, true, true
	case "policies remove":
		takeOver()
		return runPoliciesRemove, true, true
	}
	return nil, false, false
}

// checkName validates the NAME of a catalog verb (a policy's, for
// policies), or the TASK of another verb.
func checkName(verb, name string) error {
	if strings.HasPrefix(verb, "policies ") {
		if err := leasecore.ValidatePolicyName("Name", name); err != nil {
			return fmt.Errorf("NAME %q: %s", name, cli.Rule(err))
		}
		return nil
	}
	if err := leasecore.ValidateTask(name); err != nil {
		return fmt.Errorf("%s %q: %s", map[bool]string{true: "NAME", false: "TASK"}[strings.HasPrefix(verb, "tasks ")], name, cli.Rule(err))
	}
	return nil
}

// checkCatalog validates a catalog verb's flags before anything is asked.
func (v *verbFlags) checkCatalog(verb string, set map[string]bool) error {
	switch verb {
	case "tasks declare":
		if !set["ttl"] {
			return errors.New("--ttl is required: the ttl of a claim of the task that gives none")
		}
		d := leasecore.TaskDecl{Name: v.task, TTL: v.ttl, MaxTTL: v.cat.maxTTL, MinHold: v.minHold, Description: v.cat.description, RetentionPolicy: v.cat.policy}
		if set["max-ttl"] && v.cat.maxTTL == 0 {
			return errors.New("--max-ttl 0s: must be between 100ms and 24h; leave it out for no bound")
		}
		if err := d.Validate(); err != nil {
			return flagError(err, map[string]string{"TTL": "--ttl", "MaxTTL": "--max-ttl", "MinHold": "--min-hold", "Description": "--description", "RetentionPolicy": "--policy"})
		}
		if v.ttl%time.Millisecond != 0 || v.cat.maxTTL%time.Millisecond != 0 || v.minHold%time.Millisecond != 0 {
			return fmt.Errorf("--ttl, --max-ttl and --min-hold must be whole milliseconds")
		}
	case "policies declare":
		p := leasecore.RetentionPolicy{Name: v.task, KeepFor: v.cat.keepFor, KeepLast: v.cat.keepLast}
		if err := p.Validate(); err != nil {
			return flagError(err, map[string]string{"KeepFor": "--keep-for", "KeepLast": "--keep-last"})
		}
		if v.cat.keepFor%time.Second != 0 {
			return fmt.Errorf("--keep-for %s: must be whole seconds", v.cat.keepFor)
		}
	}
	return nil
}

// flagError is a validation error in the words of the flags: the flag
// that gives the field, and the rule.
func flagError(err error, flags map[string]string) error {
	var ve *leasecore.ValidationError
	if errors.As(err, &ve) && flags[ve.Field] != "" {
		return fmt.Errorf("%s: %s", flags[ve.Field], ve.Rule)
	}
	return err
}

// catalog is what a backend does for the catalog verbs. Both backends are
// one; the verbs type-assert it so that the lease verbs' backend stays as
// it is.
type catalog interface {
	listTasks(ctx context.Context, after string) ([]api.TaskDeclaration, string, error)
	// getTask and getPolicy answer nil when there is none.
	getTask(ctx context.Context, name string) (*api.TaskDeclaration, error)
	declareTask(ctx context.Context, d leasecore.TaskDecl, takeOver bool) (*api.TaskDeclaration, bool, error)
	// removeTask and removePolicy report whether there was one to remove.
	removeTask(ctx context.Context, name string, takeOver bool) (bool, error)
	listPolicies(ctx context.Context) ([]api.RetentionPolicy, error)
	getPolicy(ctx context.Context, name string) (*api.RetentionPolicy, error)
	declarePolicy(ctx context.Context, p leasecore.RetentionPolicy, takeOver bool) (*api.RetentionPolicy, bool, error)
	removePolicy(ctx context.Context, name string, takeOver bool) (bool, error)
}

var (
	_ catalog = (*client)(nil)
	_ catalog = (*storeBackend)(nil)
)

// catalogOf is b's catalog (every backend has one).
func catalogOf(b backend) catalog { return b.(catalog) }

// refusal is a catalog write's error in the operator's words: what
// Terraform manages says how to go on (77), and a policy that does not
// exist is the input's fault (64).
func refusal(kind, name string, err error) error {
	var nf *leasecore.NotFoundError
	switch {
	case errors.Is(err, leasecore.ErrManaged):
		return &reworded{fmt.Sprintf("%s %q is managed by Terraform: change it in the configuration, or remove it from the Terraform state first "+
			"(terraform state rm) and repeat with --take-over", kind, name), err}
	case errors.As(err, &nf) && nf.Kind == "retention policy":
		return exitcode.With(exitcode.Usage, fmt.Errorf("--policy %q: no such retention policy (see leasehold policies list)", nf.Name))
	case errors.Is(err, leasecore.ErrNotFound) && strings.Contains(err.Error(), "retention policy"):
		// Over a sidecar, the problem says it in words only.
		return exitcode.With(exitcode.Usage, &reworded{"--policy: no such retention policy (see leasehold policies list): " + err.Error(), err})
	}
	return err
}

func runTasksList(ctx context.Context, b backend, o *options, _ *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	decls := []api.TaskDeclaration{}
	for after := ""; ; {
		page, next, err := catalogOf(b).listTasks(ctx, after)
		if err != nil {
			return err
		}
		decls = append(decls, page...)
		if next == "" {
			break
		}
		after = next
	}
	if o.json {
		return printJSON(o.stdout, api.TaskList{Tasks: decls})
	}
	if len(decls) == 0 {
		fmt.Fprintln(o.stdout, "no declared tasks")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tTTL\tMAX TTL\tPOLICY\tMANAGED BY\tDESCRIPTION")
	for _, d := range decls {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", display(d.Name), durationText(d.TtlMs), maxTTLText(d.MaxTtlMs),
			display(d.RetentionPolicy), display(string(d.ManagedBy)), display(orDash(d.Description)))
	}
	return w.Flush()
}

func runTasksShow(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	d, err := catalogOf(b).getTask(ctx, v.task)
	if err != nil {
		return err
	}
	if d == nil {
		return exitcode.With(exitcode.Failure, fmt.Errorf("task %q is not declared", v.task))
	}
	if o.json {
		return printJSON(o.stdout, d)
	}
	printTask(o.stdout, d)
	return nil
}

func runTasksDeclare(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	d := leasecore.TaskDecl{Name: v.task, TTL: v.ttl, MaxTTL: v.cat.maxTTL, MinHold: v.minHold, Description: v.cat.description, RetentionPolicy: v.cat.policy}
	out, created, err := catalogOf(b).declareTask(ctx, d, v.cat.takeOver)
	if err != nil {
		return refusal("task", v.task, err)
	}
	if o.json {
		return printJSON(o.stdout, out)
	}
	fmt.Fprintf(o.stdout, "%s task %s\n", map[bool]string{true: "declared", false: "updated"}[created], display(v.task))
	printTask(o.stdout, out)
	return nil
}

func runTasksRemove(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	removed, err := catalogOf(b).removeTask(ctx, v.task, v.cat.takeOver)
	if err != nil {
		return refusal("task", v.task, err)
	}
	return printRemoved(o, "task", v.task, removed)
}

// Removed is what `tasks remove --json` and `policies remove --json` print:
// whether there was a declaration or policy to remove (DELETE answers 204
// or 404, with no body of its own).
type Removed struct {
	Removed bool `json:"removed"`
}

func printRemoved(o *options, kind, name string, removed bool) error {
	if o.json {
		if err := printJSON(o.stdout, Removed{Removed: removed}); err != nil {
			return err
		}
	} else if removed {
		fmt.Fprintf(o.stdout, "removed %s %s\n", kind, display(name))
	}
	if !removed {
		what := map[string]string{"task": "task %q is not declared", "retention policy": "retention policy %q does not exist"}[kind]
		return exitcode.With(exitcode.Failure, fmt.Errorf("nothing removed: "+what, name))
	}
	return nil
}

func runPoliciesList(ctx context.Context, b backend, o *options, _ *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	ps, err := catalogOf(b).listPolicies(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(o.stdout, api.PolicyList{Policies: ps})
	}
	w := tabwriter.NewWriter(o.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tKEEP FOR\tKEEP LAST\tMANAGED BY")
	for _, p := range ps {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", display(p.Name), keepForText(p.KeepForMs), keepLastText(p.KeepLast), display(string(p.ManagedBy)))
	}
	return w.Flush()
}

func runPoliciesShow(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	p, err := catalogOf(b).getPolicy(ctx, v.task)
	if err != nil {
		return err
	}
	if p == nil {
		return exitcode.With(exitcode.Failure, fmt.Errorf("retention policy %q does not exist", v.task))
	}
	if o.json {
		return printJSON(o.stdout, p)
	}
	printPolicy(o.stdout, p)
	return nil
}

func runPoliciesDeclare(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	p := leasecore.RetentionPolicy{Name: v.task, KeepFor: v.cat.keepFor, KeepLast: v.cat.keepLast}
	out, created, err := catalogOf(b).declarePolicy(ctx, p, v.cat.takeOver)
	if err != nil {
		return refusal("retention policy", v.task, err)
	}
	if o.json {
		return printJSON(o.stdout, out)
	}
	fmt.Fprintf(o.stdout, "%s retention policy %s\n", map[bool]string{true: "declared", false: "updated"}[created], display(v.task))
	printPolicy(o.stdout, out)
	return nil
}

func runPoliciesRemove(ctx context.Context, b backend, o *options, v *verbFlags) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	removed, err := catalogOf(b).removePolicy(ctx, v.task, v.cat.takeOver)
	if err != nil {
		return refusal("retention policy", v.task, err)
	}
	return printRemoved(o, "retention policy", v.task, removed)
}

// printTask prints a declaration as label and value lines.
func printTask(w io.Writer, d *api.TaskDeclaration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\n", display(d.Name))
	fmt.Fprintf(tw, "ttl\t%s\n", durationText(d.TtlMs))
	fmt.Fprintf(tw, "max ttl\t%s\n", maxTTLText(d.MaxTtlMs))
	if d.MinHoldMs != nil {
		fmt.Fprintf(tw, "min hold\t%s\n", millisText(*d.MinHoldMs))
	}
	fmt.Fprintf(tw, "policy\t%s\n", display(d.RetentionPolicy))
	fmt.Fprintf(tw, "managed by\t%s\n", display(string(d.ManagedBy)))
	fmt.Fprintf(tw, "description\t%s\n", display(orDash(d.Description)))
	fmt.Fprintf(tw, "created\t%s\n", display(d.CreatedAt))
	fmt.Fprintf(tw, "updated\t%s\n", display(d.UpdatedAt))
	_ = tw.Flush()
}

// printPolicy prints a retention policy as label and value lines.
func printPolicy(w io.Writer, p *api.RetentionPolicy) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\n", display(p.Name))
	fmt.Fprintf(tw, "keep for\t%s\n", keepForText(p.KeepForMs))
	fmt.Fprintf(tw, "keep last\t%s\n", keepLastText(p.KeepLast))
	fmt.Fprintf(tw, "managed by\t%s\n", display(string(p.ManagedBy)))
	fmt.Fprintf(tw, "created\t%s\n", display(p.CreatedAt))
	fmt.Fprintf(tw, "updated\t%s\n", display(p.UpdatedAt))
	_ = tw.Flush()
}

// durationText is a declared duration as an operator would write it: Go's
// spelling without its zero units (10m, not 10m0s; 1h30m).
func durationText(ms int64) string {
	s := (time.Duration(ms) * time.Millisecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func maxTTLText(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return durationText(*ms)
}

func keepForText(ms int64) string {
	if ms == 0 {
		return "no age limit"
	}
	return durationText(ms)
}

func keepLastText(n int64) string {
	if n == 0 {
		return "no count limit"
	}
	return fmt.Sprint(n)
}

// The sidecar's side: the Go client, with the operator's messages.

func (c *client) listTasks(ctx context.Context, after string) ([]api.TaskDeclaration, string, error) {
	if c.err != nil {
		return nil, "", c.err
	}
	decls, next, err := c.lc.ListTasks(ctx, lhclient.ListParams{After: after, Limit: listPage})
	if err != nil {
		return nil, "", c.fail(err)
	}
	out := make([]api.TaskDeclaration, len(decls))
	for i := range decls {
		out[i] = api.FromTask(&decls[i])
	}
	return out, next, nil
}

func (c *client) getTask(ctx context.Context, name string) (*api.TaskDeclaration, error) {
	if c.err != nil {
		return nil, c.err
	}
	d, err := c.lc.GetTask(ctx, name)
	if err != nil || d == nil {
		return nil, c.fail(err)
	}
	out := api.FromTask(d)
	return &out, nil
}

func (c *client) declareTask(ctx context.Context, d leasecore.TaskDecl, takeOver bool) (*api.TaskDeclaration, bool, error) {
	if c.err != nil {
		return nil, false, c.err
	}
	got, created, err := c.lc.DeclareTask(ctx, d, takeOver)
	if err != nil {
		return nil, false, c.fail(err)
	}
	out := api.FromTask(got)
	return &out, created, nil
}

func (c *client) removeTask(ctx context.Context, name string, takeOver bool) (bool, error) {
	if c.err != nil {
		return false, c.err
	}
	ok, err := c.lc.RemoveTask(ctx, name, takeOver)
	return ok, c.fail(err)
}

func (c *client) listPolicies(ctx context.Context) ([]api.RetentionPolicy, error) {
	if c.err != nil {
		return nil, c.err
	}
	ps, err := c.lc.ListPolicies(ctx)
	if err != nil {
		return nil, c.fail(err)
	}
	return policiesOut(ps), nil
}

func (c *client) getPolicy(ctx context.Context, name string) (*api.RetentionPolicy, error) {
	if c.err != nil {
		return nil, c.err
	}
	p, err := c.lc.GetPolicy(ctx, name)
	if err != nil || p == nil {
		return nil, c.fail(err)
	}
	out := api.FromPolicy(p)
	return &out, nil
}

func (c *client) declarePolicy(ctx context.Context, p leasecore.RetentionPolicy, takeOver bool) (*api.RetentionPolicy, bool, error) {
	if c.err != nil {
		return nil, false, c.err
	}
	got, created, err := c.lc.DeclarePolicy(ctx, p, takeOver)
	if err != nil {
		return nil, false, c.fail(err)
	}
	out := api.FromPolicy(got)
	return &out, created, nil
}

func (c *client) removePolicy(ctx context.Context, name string, takeOver bool) (bool, error) {
	if c.err != nil {
		return false, c.err
	}
	ok, err := c.lc.RemovePolicy(ctx, name, takeOver)
	return ok, c.fail(err)
}

func policiesOut(ps []leasecore.RetentionPolicy) []api.RetentionPolicy {
	out := make([]api.RetentionPolicy, len(ps))
	for i := range ps {
		out[i] = api.FromPolicy(&ps[i])
	}
	return out
}

// The store's side: a Service, writing as an operator.

func operator(takeOver bool) leasecore.Writer {
	return leasecore.Writer{By: leasecore.ManagedByOperator, TakeOver: takeOver}
}

func (s *storeBackend) listTasks(ctx context.Context, after string) ([]api.TaskDeclaration, string, error) {
	decls, next, err := s.svc.ListTasks(ctx, leasecore.ListParams{Limit: listPage, After: after})
	if err != nil {
		return nil, "", err
	}
	out := make([]api.TaskDeclaration, len(decls))
	for i := range decls {
		out[i] = api.FromTask(&decls[i])
	}
	return out, next, nil
}

func (s *storeBackend) getTask(ctx context.Context, name string) (*api.TaskDeclaration, error) {
	d, err := s.svc.GetTask(ctx, name)
	if err != nil || d == nil {
		return nil, err
	}
	out := api.FromTask(d)
	return &out, nil
}

func (s *storeBackend) declareTask(ctx context.Context, d leasecore.TaskDecl, takeOver bool) (*api.TaskDeclaration, bool, error) {
	got, created, err := s.svc.DeclareTask(ctx, d, operator(takeOver))
	if err != nil {
		return nil, false, err
	}
	out := api.FromTask(got)
	return &out, created, nil
}

func (s *storeBackend) removeTask(ctx context.Context, name string, takeOver bool) (bool, error) {
	return s.svc.DeleteTask(ctx, name, operator(takeOver))
}

func (s *storeBackend) listPolicies(ctx context.Context) ([]api.RetentionPolicy, error) {
	ps, err := s.svc.ListPolicies(ctx)
	if err != nil {
		return nil, err
	}
	return policiesOut(ps), nil
}

func (s *storeBackend) getPolicy(ctx context.Context, name string) (*api.RetentionPolicy, error) {
	p, err := s.svc.GetPolicy(ctx, name)
	if err != nil || p == nil {
		return nil, err
	}
	out := api.FromPolicy(p)
	return &out, nil
}

func (s *storeBackend) declarePolicy(ctx context.Context, p leasecore.RetentionPolicy, takeOver bool) (*api.RetentionPolicy, bool, error) {
	got, created, err := s.svc.DeclarePolicy(ctx, p, operator(takeOver))
	if err != nil {
		return nil, false, err
	}
	out := api.FromPolicy(got)
	return &out, created, nil
}

func (s *storeBackend) removePolicy(ctx context.Context, name string, takeOver bool) (bool, error) {
	return s.svc.DeletePolicy(ctx, name, operator(takeOver))
}
