package sidecar

import (
	"fmt"
	"log/slog"
	"strings"
)

// File descriptors. Every keepalive and watch stream holds its connection,
// one descriptor, for as long as it lasts, so the stream caps must fit the
// process's open-file limit (RLIMIT_NOFILE): a connection that arrives when
// none is left is not accepted at all, and its client hangs instead of
// being answered 503. Serve therefore raises the soft limit to the hard one
// and checks the caps against it at start (fitFileLimit), and its listener
// answers 503 itself when descriptors run out anyway (fdListener).

// FileReserve is how many file descriptors `leasehold serve` keeps, beyond
// one per keepalive and watch stream, for everything else: the store's
// connections (PostgreSQL's pool, 4 by default, and its LISTEN connection;
// SQLite's database, WAL and shared-memory files), plain requests in flight
// and idle keep-alive connections, the listener, the standard streams and
// log files. A sidecar at rest uses about 20 of them.
const FileReserve = 256

// fileLimitUnbounded is the open-file limit above which the caps are not
// checked: the system's own limits (memory, fs.nr_open) come first.
const fileLimitUnbounded = 1 << 30

// fitFileLimit raises the process's soft open-file limit to its hard limit
// (Go's runtime already lifts it to one below the hard limit at start) and
// returns the stream caps Serve runs with: cfg's, when they fit the limit
// with FileReserve to spare. A cap left at its default (0) that does not
// fit is lowered to fit, with a warning; a cap given that does not fit is
// refused with an error naming its flag, the limit and how to raise it.
// Where the limit cannot be read, the caps are taken as they are.
func fitFileLimit(cfg Config, log *slog.Logger) (streams, watchers int, err error) {
	limit, err := raiseFileLimit()
	if err != nil {
		log.Warn("cannot read the open-file limit; the stream caps are not checked against it", "err", err)
		return capOrDefault(cfg.MaxStreams, DefaultMaxStreams), capOrDefault(cfg.MaxWatchers, DefaultMaxWatchers), nil
	}
	streams, watchers, lowered, err := fitCaps(limit, cfg.MaxStreams, cfg.MaxWatchers)
	if err != nil {
		return 0, 0, err
	}
	if len(lowered) > 0 {
		attrs := []any{"open_file_limit", limit, "reserve", FileReserve}
		for _, l := range lowered {
			key := strings.ReplaceAll(strings.TrimPrefix(l.flag, "--"), "-", "_") // max_streams
			attrs = append(attrs, key, fmt.Sprintf("%d (default %d)", l.to, l.from))
		}
		log.Warn("default stream caps lowered to fit the open-file limit; raise the limit to keep them (docs/configuration.md)", attrs...)
	}
	if limit < fileLimitUnbounded {
		log.Info("stream caps fit the open-file limit", "open_file_limit", limit, "max_streams", streams, "max_watchers", watchers)
	}
	return streams, watchers, nil
}

func capOrDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// loweredCap is a default cap fitCaps lowered.
type loweredCap struct {
	flag     string
	from, to int
}

// fitCaps fits the stream caps to an open-file limit: each stream and
// watcher holds a descriptor, and FileReserve more are kept. A cap of 0
// means its default, which is lowered when it does not fit: both defaults
// share what is left in their own proportion, or one takes what a given cap
// leaves. A given cap (above 0) is never changed: when the given caps leave
// no room (a default needs at least 1), it is an error naming them.
func fitCaps(limit uint64, maxStreams, maxWatchers int) (streams, watchers int, lowered []loweredCap, err error) {
	type cap struct {
		flag       string
		value, def int
		given      bool
	}
	caps := []*cap{
		{flag: "--max-streams", value: maxStreams, def: DefaultMaxStreams, given: maxStreams > 0},
		{flag: "--max-watchers", value: maxWatchers, def: DefaultMaxWatchers, given: maxWatchers > 0},
	}
	var given []string
	need, defaults := 0, 0 // descriptors the given caps need; the defaults' sum
	for _, c := range caps {
		if c.given {
			need += c.value
			given = append(given, fmt.Sprintf("%s %d", c.flag, c.value))
		} else {
			c.value = c.def
			need++ // a default cap is lowered down to 1, not below
			defaults += c.def
		}
	}
	if limit >= fileLimitUnbounded {
		return caps[0].value, caps[1].value, nil, nil
	}
	budget := int(limit) - FileReserve
	if need > budget {
		return 0, 0, nil, capsError(limit, budget, given, len(caps)-len(given))
	}
	if left := budget - need + len(caps) - len(given); defaults > left {
		// Share what the given caps leave between the defaults, in the
		// defaults' proportion; the last one takes the rounding.
		for _, c := range caps {
			if c.given {
				continue
			}
			to := max(1, left*c.def/defaults)
			left -= to
			defaults -= c.def
			lowered = append(lowered, loweredCap{flag: c.flag, from: c.def, to: to})
			c.value = to
		}
	}
	return caps[0].value, caps[1].value, lowered, nil
}

// capsError says that the given caps (or, with none given, leasehold serve
// itself) do not fit an open-file limit, and what to do about it.
func capsError(limit uint64, budget int, given []string, defaults int) error {
	const raise = "raise the hard limit where leasehold is started (ulimit -Hn as root, systemd LimitNOFILE=, docker run --ulimit nofile=N:N)"
	why := fmt.Sprintf("each keepalive or watch stream holds one, beside %d kept for the store, plain requests and the listener", FileReserve)
	switch {
	case len(given) == 0 || budget < 1+defaults:
		return fmt.Errorf("the open-file limit (RLIMIT_NOFILE) is %d, below the %d file descriptors leasehold serve needs at least (%s); %s",
			limit, FileReserve+2, why, raise)
	case defaults == 0:
		return fmt.Errorf("%s need more file descriptors than the open-file limit (RLIMIT_NOFILE) of %d allows (%s): lower them to at most %d together, or %s",
			strings.Join(given, " and "), limit, why, budget, raise)
	default:
		flag, _, _ := strings.Cut(given[0], " ")
		return fmt.Errorf("%s needs more file descriptors than the open-file limit (RLIMIT_NOFILE) of %d allows (%s, and 1 for the other kind's default cap): lower %s to at most %d, or %s",
			given[0], limit, why, flag, budget-defaults, raise)
	}
}
