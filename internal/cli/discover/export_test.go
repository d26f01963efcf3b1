package discover

// SetChanged marks --source and --file-root as given (tests call Run directly).
func SetChanged(o *Options, source, root bool) { o.Discovery.SetChanged(source, root) }
