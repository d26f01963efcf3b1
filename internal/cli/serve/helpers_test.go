package serve_test

import "log/slog"

type slogLogger = slog.Logger

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
