package leasecore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultWatchPoll is how often a watch asks its store for other processes'
// commits (HistoryFeed.HistoryChanges), unless it says otherwise: the
// longest such a commit waits before the watch reads it.
const DefaultWatchPoll = 100 * time.Millisecond

// ValidateTaskPrefix checks a prefix of task names, as a watch or a scope
// of credentials filters by: at most MaxTaskLen characters of the task
// charset; empty matches every task.
func ValidateTaskPrefix(prefix string) error {
	if len(prefix) > MaxTaskLen {
		return &ValidationError{Field: "Prefix", Rule: fmt.Sprintf("must be at most %d characters", MaxTaskLen)}
	}
	for i := 0; i < len(prefix); i++ {
		if !isTaskChar(prefix[i]) {
			return &ValidationError{Field: "Prefix", Rule: fmt.Sprintf("must be characters of %s; %q at position %d is not", taskCharsetMsg, rune(prefix[i]), i+1)}
		}
	}
	return nil
}

// HistoryFeed returns the store's HistoryFeed as the Service calls it: each
// call through the Service's interceptors (OpFollowHistory, OpReadHistory,
// OpRecordExpiries) and bounded by its operation timeout, and every error
// an outcome: a *PositionAheadError (from FollowHistory and a cursor's
// Next) or one wrapping ErrUnavailable. HistoryChanges, a hint of when to
// read, is the store's own. It answers ErrUnavailable when the store cannot
// follow its history. The watch (package leasecore/watch) is built on it.
func (s *Service) HistoryFeed() (HistoryFeed, error) {
	feed, ok := s.store.(HistoryFeed)
	if !ok {
		return nil, Unavailable(OpFollowHistory, errors.New("the store cannot follow its history"))
	}
	return &serviceFeed{s: s, feed: feed}, nil
}

// serviceFeed is a store's HistoryFeed called through its Service.
type serviceFeed struct {
	s    *Service
	feed HistoryFeed
}

func (f *serviceFeed) FollowHistory(ctx context.Context, after int64) (HistoryCursor, error) {
	var cur HistoryCursor
	err := f.s.callBounded(ctx, OpFollowHistory, func(ctx context.Context) (err error) {
		cur, err = f.feed.FollowHistory(ctx, after)
		return err
	})
	if err != nil {
		return nil, outcome(OpFollowHistory, err, ErrPositionAhead)
	}
	return &serviceCursor{s: f.s, HistoryCursor: cur}, nil
}

func (f *serviceFeed) HistoryChanges(ctx context.Context, poll time.Duration) (<-chan struct{}, error) {
	return f.feed.HistoryChanges(ctx, poll)
}

func (f *serviceFeed) RecordExpiries(ctx context.Context, limit int) (ExpirySweep, error) {
	var sw ExpirySweep
	err := f.s.callBounded(ctx, OpRecordExpiries, func(ctx context.Context) (err error) {
		sw, err = f.feed.RecordExpiries(ctx, limit)
		return err
	})
	if err != nil {
		return ExpirySweep{}, outcome(OpRecordExpiries, err)
	}
	return sw, nil
}

// serviceCursor is a store's HistoryCursor whose reads go through its
// Service.
type serviceCursor struct {
	s *Service
	HistoryCursor
}

func (c *serviceCursor) Next(ctx context.Context, limit int) ([]Event, error) {
	var evs []Event
	err := c.s.callBounded(ctx, OpReadHistory, func(ctx context.Context) (err error) {
		evs, err = c.HistoryCursor.Next(ctx, limit)
		return err
	})
	if err != nil {
		return nil, outcome(OpReadHistory, err, ErrPositionAhead)
	}
	return evs, nil
}

// callBounded is call with the Service's operation timeout.
func (s *Service) callBounded(ctx context.Context, op string, fn func(context.Context) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.call(ctx, op, fn)
}
