package logging

import "flag"

// RegisterFlags binds --log-level and --log-format.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	if o.Level == "" {
		o.Level = "info"
	}
	if o.Format == "" {
		o.Format = "json"
	}
	fs.StringVar(&o.Level, "log-level", o.Level, "log level: debug, info, warn or error")
	fs.StringVar(&o.Format, "log-format", o.Format, "log format: json or text")
}
