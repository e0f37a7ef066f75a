package raftnode

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hcLogger sends hashicorp/raft's logs to slog. It embeds a null hclog.Logger for the parts of
// the interface raft does not use (standard-library adapters, level changes).
type hcLogger struct {
	hclog.Logger
	log  *slog.Logger
	name string
}

func newHCLogger(l *slog.Logger) hclog.Logger {
	return &hcLogger{Logger: hclog.NewNullLogger(), log: l}
}

var hcLevels = map[hclog.Level]slog.Level{
	hclog.Trace: slog.LevelDebug - 4,
	hclog.Debug: slog.LevelDebug,
	hclog.Info:  slog.LevelInfo,
	hclog.Warn:  slog.LevelWarn,
	hclog.Error: slog.LevelError,
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...interface{}) {
	lv, ok := hcLevels[level]
	if !ok {
		lv = slog.LevelInfo
	}
	for i, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...) // hclog.Fmt("%+v", x): format it as hclog would
			}
		}
	}
	h.log.Log(context.Background(), lv, msg, args...)
}

func (h *hcLogger) Trace(msg string, args ...interface{}) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...interface{}) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...interface{})  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...interface{})  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...interface{}) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) IsTrace() bool { return h.log.Enabled(context.Background(), slog.LevelDebug-4) }
func (h *hcLogger) IsDebug() bool { return h.log.Enabled(context.Background(), slog.LevelDebug) }
func (h *hcLogger) IsInfo() bool  { return h.log.Enabled(context.Background(), slog.LevelInfo) }
func (h *hcLogger) IsWarn() bool  { return h.log.Enabled(context.Background(), slog.LevelWarn) }
func (h *hcLogger) IsError() bool { return h.log.Enabled(context.Background(), slog.LevelError) }

func (h *hcLogger) With(args ...interface{}) hclog.Logger {
	return &hcLogger{Logger: h.Logger, log: h.log.With(args...), name: h.name}
}

func (h *hcLogger) Name() string { return h.name }

func (h *hcLogger) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return &hcLogger{Logger: h.Logger, log: h.log.With("logger", name), name: name}
}

func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	return &hcLogger{Logger: h.Logger, log: h.log.With("logger", name), name: name}
}

// HCLogger adapts l for hashicorp libraries (raft's transport takes one).
func HCLogger(l *slog.Logger) hclog.Logger { return newHCLogger(l) }
