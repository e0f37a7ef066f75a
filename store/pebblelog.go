package store

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// pebbleLogger sends pebble's printf-style log lines to slog, under the fixed message
// "pebble" with the formatted text as the "event" attribute.
type pebbleLogger struct {
	log *slog.Logger
}

var _ pebble.Logger = pebbleLogger{}

func (l pebbleLogger) Infof(format string, args ...any) {
	l.logf(slog.LevelInfo, format, args...)
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.logf(slog.LevelError, format, args...)
}

// Fatalf is how pebble reports a broken invariant or corrupt data (its default logger
// calls os.Exit). Carrying on would risk acknowledging writes that are not durable, so
// this logs and panics: the process stops with a stack trace that says where.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble fatal", "event", msg)
	panic("pebble: " + msg)
}

func (l pebbleLogger) logf(level slog.Level, format string, args ...any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return // skip the Sprintf
	}
	l.log.Log(ctx, level, "pebble", "event", fmt.Sprintf(format, args...))
}
