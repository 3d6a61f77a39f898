package deploy

import (
	"flag"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/sidecar"
)

// composeFile is the compose file under test, relative to this package.
const composeFile = "../docker-compose.yml"

// The services of docker-compose.yml.
const (
	postgresService = "postgres"
	migrateService  = "migrate"
)

// sidecarServices run `leasehold serve`.
var sidecarServices = []string{"leasehold-a", "leasehold-b"}

// workerServices run examples/worker/worker.py, one beside each sidecar.
var workerServices = []string{"worker-a", "worker-b"}

// loadCompose loads docker-compose.yml with Load.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	p, err := Load(t.Context(), "..")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return s
}

// serveConfig parses a sidecar service's command with `leasehold serve`'s own
// flags, as the binary does, and validates the result.
func serveConfig(t *testing.T, s types.ServiceConfig) sidecar.Config {
	t.Helper()
	if len(s.Entrypoint) != 0 {
		t.Fatalf("%s overrides the image's entrypoint (%q): its command would not go to leasehold", s.Name, s.Entrypoint)
	}
	if len(s.Command) == 0 || s.Command[0] != "serve" {
		t.Fatalf("%s: command %q, want leasehold serve", s.Name, s.Command)
	}
	// Every setting is on the command line, so no variable is read.
	fs := flag.NewFlagSet(s.Name+" serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := sidecar.ParseServeArgs(fs, s.Command[1:], func(string) string { return "" })
	if err != nil {
		// Not the command itself: a store URL in it may carry a password.
		t.Fatalf("%s: leasehold serve refuses its command line: %v", s.Name, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: leasehold serve refuses its configuration: %v", s.Name, err)
	}
	return cfg
}

// migrateStore parses the migrate service's command with `leasehold
// migrate`'s own flags, as the binary does, and returns its --store.
func migrateStore(t *testing.T, s types.ServiceConfig) string {
	t.Helper()
	if len(s.Entrypoint) != 0 {
		t.Fatalf("%s overrides the image's entrypoint (%q): its command would not go to leasehold", s.Name, s.Entrypoint)
	}
	if len(s.Command) == 0 || s.Command[0] != "migrate" {
		t.Fatalf("%s: command %q, want leasehold migrate", s.Name, s.Command)
	}
	cfg := cli.DefaultStoreConfig()
	fs := flag.NewFlagSet(s.Name+" migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	// Every setting is on the command line, so no variable is read.
	if err := cli.ParseArgs(fs, s.Command[1:], func(string) string { return "" }); err != nil {
		t.Fatalf("%s: leasehold migrate refuses its command %q: %v", s.Name, s.Command, err)
	}
	if _, err := cli.NewLogger(cfg.LogFormat, io.Discard); err != nil {
		t.Fatalf("%s: %v", s.Name, err)
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "store" })
	if !given {
		t.Fatalf("%s: command %q has no --store: it would migrate the default SQLite file inside its container", s.Name, s.Command)
	}
	return cfg.Store
}

// secretPath is where a service's secret appears inside its container.
func secretPath(ref types.ServiceSecretConfig) string {
	switch {
	case ref.Target == "":
		return "/run/secrets/" + ref.Source
	case path.IsAbs(ref.Target):
		return ref.Target
	default:
		return "/run/secrets/" + ref.Target
	}
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	want := append([]string{postgresService, migrateService}, sidecarServices...)
	want = append(want, workerServices...)
	got := p.ServiceNames()
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services %q, want %q", got, want)
	}
	// Every leasehold setting is on the command line, so that the same
	// lines run outside Docker (e2e/compose_test.go and worker_test.go run
	// them).
	for _, name := range slices.Concat([]string{migrateService}, sidecarServices, workerServices) {
		for k := range service(t, p, name).Environment {
			if strings.HasPrefix(k, cli.EnvPrefix) {
				t.Errorf("%s sets %s in environment:, put it on the command line", name, k)
			}
		}
	}
}

// Each sidecar's command is accepted by `leasehold serve`: it listens where
// its published port and its healthcheck point, and its token file is the
// secret it mounts.
func TestComposeServeCommands(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	published := map[string]string{} // host port → service
	for _, name := range sidecarServices {
		t.Run(name, func(t *testing.T) {
			s := service(t, p, name)
			cfg := serveConfig(t, s)
			host, port, err := net.SplitHostPort(cfg.Listen)
			if err != nil {
				t.Fatal(err)
			}
			if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
				t.Errorf("--listen %s: a published port reaches a container on its own interface, not on %s; listen on 0.0.0.0", cfg.Listen, host)
			}

			if cfg.TokenFile == "" {
				t.Fatal("no --token-file") // Validate allows that only on loopback
			}
			mounted := slices.ContainsFunc(s.Secrets, func(ref types.ServiceSecretConfig) bool {
				return secretPath(ref) == cfg.TokenFile
			})
			if !mounted {
				t.Errorf("--token-file %s is none of the secrets the service mounts (%+v)", cfg.TokenFile, s.Secrets)
			}

			if len(s.Ports) == 0 {
				t.Error("no published port")
			}
			for _, pc := range s.Ports {
				if got := pc.Target; got == 0 || port != strconv.FormatUint(uint64(got), 10) {
					t.Errorf("port %s:%s:%d publishes container port %d, but leasehold listens on %s", pc.HostIP, pc.Published, pc.Target, got, cfg.Listen)
				}
				if other, dup := published[pc.Published]; dup {
					t.Errorf("host port %s is published by %s too", pc.Published, other)
				}
				published[pc.Published] = name
			}

			hc := s.HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) == 0 {
				t.Fatal("no healthcheck")
			}
			if hc.Test[0] != "CMD" {
				t.Errorf("healthcheck %q: want the exec form (CMD …); the image has no shell to rely on", hc.Test)
			}
			i := slices.IndexFunc(hc.Test, func(a string) bool { return strings.HasPrefix(a, "http://") })
			if i < 0 {
				t.Fatalf("healthcheck %q requests no http:// URL", hc.Test)
			}
			u, err := url.Parse(hc.Test[i])
			if err != nil {
				t.Fatalf("healthcheck URL: %v", err)
			}
			if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
				t.Errorf("healthcheck URL %s: want a loopback address inside the container", u)
			}
			if u.Port() != port || u.Path != "/readyz" {
				t.Errorf("healthcheck URL %s: want /readyz on port %s, where leasehold listens", u, port)
			}
		})
	}
}

// Every leasehold service uses the same store: the postgres service's
// database, as its user, with its password.
func TestComposeStoreMatchesPostgres(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	pg := service(t, p, postgresService)
	env := func(k string) string {
		if v := pg.Environment[k]; v != nil && *v != "" {
			return *v
		}
		t.Fatalf("%s sets no %s", postgresService, k)
		return ""
	}
	user, password, db := env("POSTGRES_USER"), env("POSTGRES_PASSWORD"), env("POSTGRES_DB")

	stores := map[string]string{migrateService: migrateStore(t, service(t, p, migrateService))}
	for _, name := range sidecarServices {
		stores[name] = serveConfig(t, service(t, p, name)).Store
	}
	for name, store := range stores {
		u, err := url.Parse(store)
		if err != nil {
			t.Errorf("%s: --store: %v", name, err)
			continue
		}
		gotPassword, _ := u.User.Password()
		switch {
		case u.Scheme != "postgres" && u.Scheme != "postgresql":
			t.Errorf("%s: --store %s is not a postgres:// URL", name, store)
		case u.Hostname() != postgresService || (u.Port() != "" && u.Port() != "5432"):
			t.Errorf("%s: --store host %s, want the %s service on 5432", name, u.Host, postgresService)
		case u.User.Username() != user:
			t.Errorf("%s: --store user %q, want POSTGRES_USER %q", name, u.User.Username(), user)
		case gotPassword != password:
			t.Errorf("%s: --store password %q, want POSTGRES_PASSWORD %q", name, gotPassword, password)
		case strings.TrimPrefix(u.Path, "/") != db:
			t.Errorf("%s: --store database %q, want POSTGRES_DB %q", name, strings.TrimPrefix(u.Path, "/"), db)
		}
		if store != stores[migrateService] {
			t.Errorf("%s: --store %s, but migrate migrates %s", name, store, stores[migrateService])
		}
	}
}

// Nothing is published beyond the machine running compose.
func TestComposePortsLoopbackOnly(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range p.ServiceNames() {
		for _, pc := range service(t, p, name).Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes port %d on host address %q, want 127.0.0.1 only", name, pc.Target, pc.HostIP)
			}
		}
	}
}

// The secret the sidecars mount exists and holds a token the sidecar accepts.
func TestComposeSecretFile(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range sidecarServices {
		for _, ref := range service(t, p, name).Secrets {
			sec, ok := p.Secrets[ref.Source]
			if !ok || sec.File == "" {
				t.Errorf("%s mounts secret %q, which names no file", name, ref.Source)
				continue
			}
			if _, err := endpoint.ReadTokenFile(sec.File); err != nil {
				t.Errorf("%s mounts secret %q: %v", name, ref.Source, err)
			}
		}
	}
}

// PostgreSQL is ready before migrate runs, and the sidecars start only after
// migrate succeeded.
func TestComposeStartupOrder(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	if hc := service(t, p, postgresService).HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
		t.Errorf("%s has no healthcheck: service_healthy would never hold", postgresService)
	}
	if r := service(t, p, migrateService).Restart; r != "" && r != types.RestartPolicyNo {
		t.Errorf("%s restarts (%q): a one-shot job that restarts never completes", migrateService, r)
	}
	type dependency struct{ service, dependsOn, condition string }
	cases := []dependency{{migrateService, postgresService, types.ServiceConditionHealthy}}
	for _, name := range sidecarServices {
		cases = append(cases, dependency{name, migrateService, types.ServiceConditionCompletedSuccessfully})
	}
	for _, c := range cases {
		dep, ok := service(t, p, c.service).DependsOn[c.dependsOn]
		if !ok {
			t.Errorf("%s does not depend on %s", c.service, c.dependsOn)
			continue
		}
		if dep.Condition != c.condition {
			t.Errorf("%s depends on %s with condition %q, want %q", c.service, c.dependsOn, dep.Condition, c.condition)
		}
	}
}

// Each demo worker runs examples/worker/worker.py from the repository (its
// client package beside it, where the script looks for it) on a Python
// image, points at a sidecar service by name on the port that sidecar
// listens on, with the token file that sidecar wants, and starts once that
// sidecar is healthy; every sidecar has one worker, and all want one task.
func TestComposeWorkers(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	workerOf := map[string]string{} // sidecar → its worker
	tasks := map[string]bool{}
	for _, name := range workerServices {
		t.Run(name, func(t *testing.T) {
			s := service(t, p, name)
			if !strings.HasPrefix(s.Image, "python:3.") {
				t.Errorf("image %q: want an official python:3.x image (the client needs Python >= 3.11)", s.Image)
			}
			script, flags, err := WorkerCommand(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct{ container, repo string }{
				{script, "examples/worker/worker.py"},
				// worker.py imports leasehold_client from ../../clients/python.
				{path.Join(path.Dir(script), "../../clients/python/leasehold_client/__init__.py"), "clients/python/leasehold_client/__init__.py"},
			} {
				host, ok := HostPath(s, f.container)
				if !ok {
					t.Errorf("%s: no bind mount shows the container path %s", name, f.container)
					continue
				}
				if want := filepath.Join(repo, f.repo); host != want {
					t.Errorf("%s: container path %s is %s on the host, want %s", name, f.container, host, want)
				}
				if _, err := os.Stat(host); err != nil {
					t.Errorf("%s: container path %s: %v", name, f.container, err)
				}
			}
			for k := range flags {
				if !slices.Contains([]string{"sidecar", "task", "ttl-ms", "token-file", "interval"}, k) {
					t.Errorf("--%s is no flag of worker.py", k)
				}
			}
			if ttl, ok := flags["ttl-ms"]; ok {
				if n, err := strconv.Atoi(ttl); err != nil || n <= 0 {
					t.Errorf("--ttl-ms %q: want a positive number of milliseconds", ttl)
				}
			}
			tasks[flags["task"]] = true

			u, err := url.Parse(flags["sidecar"])
			if err != nil || u.Scheme != "http" || u.Path != "" && u.Path != "/" {
				t.Fatalf("--sidecar %q: want http://SERVICE:PORT", flags["sidecar"])
			}
			sc := u.Hostname()
			if !slices.Contains(sidecarServices, sc) {
				t.Fatalf("--sidecar %s: %s is none of the sidecar services %q", u, sc, sidecarServices)
			}
			if other, dup := workerOf[sc]; dup {
				t.Errorf("%s and %s both work beside %s", other, name, sc)
			}
			workerOf[sc] = name
			side := service(t, p, sc)
			cfg := serveConfig(t, side)
			if _, port, _ := net.SplitHostPort(cfg.Listen); u.Port() != port {
				t.Errorf("--sidecar %s: %s listens on port %s", u, sc, port)
			}
			// The worker's requests carry Host: SERVICE:PORT, which the
			// sidecar answers only when told to (--allow-host).
			if hosts, err := sidecar.NewHostPolicy(cfg.Listen, cfg.AllowHosts); err != nil || !hosts.Allows(u.Host) {
				t.Errorf("--sidecar %s: %s does not answer for the host %s (add --allow-host %s; err %v)", u, sc, u.Host, sc, err)
			}
			if dep, ok := s.DependsOn[sc]; !ok || dep.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s does not wait for %s to be healthy (depends_on %+v)", name, sc, s.DependsOn)
			}

			// The worker's token file is a secret it mounts, the one its
			// sidecar reads its --token-file from.
			mountedBy := func(s types.ServiceConfig, file string) string {
				for _, ref := range s.Secrets {
					if secretPath(ref) == file {
						return ref.Source
					}
				}
				return ""
			}
			mine, theirs := mountedBy(s, flags["token-file"]), mountedBy(side, cfg.TokenFile)
			switch {
			case flags["token-file"] == "":
				t.Errorf("no --token-file: %s wants its bearer token", sc)
			case mine == "":
				t.Errorf("--token-file %s is none of the secrets %s mounts (%+v)", flags["token-file"], name, s.Secrets)
			case mine != theirs:
				t.Errorf("--token-file %s is secret %q, but %s reads its token from secret %q", flags["token-file"], mine, sc, theirs)
			}
		})
	}
	for _, sc := range sidecarServices {
		if _, ok := workerOf[sc]; !ok {
			t.Errorf("no worker beside %s", sc)
		}
	}
	if len(tasks) != 1 {
		t.Errorf("the workers want the tasks %v: want one shared task", slices.Collect(maps.Keys(tasks)))
	}
}

// The image is stamped with the version it was built from: the
// Dockerfile takes it as a build argument into the binary (.git is not
// in the build context, so the binary cannot find it itself), and every
// service built from it passes one.
func TestImageStampsVersion(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(b)
	arg := strings.Index(dockerfile, "\nARG VERSION")
	build := strings.Index(dockerfile, "go build")
	if arg < 0 || build < arg || !strings.Contains(dockerfile[build:], "-X github.com/leasehold/leasehold/internal/version.version=${VERSION}") {
		t.Errorf("the Dockerfile does not stamp the binary with a VERSION build argument (ARG VERSION, then go build -ldflags -X …/internal/version.version=${VERSION})")
	}
	p := loadCompose(t)
	built := 0
	for _, s := range p.Services {
		if s.Build == nil {
			continue
		}
		built++
		if v := s.Build.Args["VERSION"]; v == nil || *v == "" {
			t.Errorf("%s is built from the Dockerfile without a VERSION build argument", s.Name)
		}
	}
	if built == 0 {
		t.Error("no service is built from the Dockerfile")
	}
}
