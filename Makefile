# sttd — speech-to-text for the Linux desktop.
#   make demo       dictate recorded speech through a virtual microphone (headless is fine)
#   make test       install what the tests need, build, and run the whole suite, then install
#                   the package (make deb) into a fresh Debian root and dictate there
#   make install    install what building and running need, then sttd for the current user
#                   (PREFIX=$(HOME)/.local); BUILD_DIR=dir installs binaries built there already
#   make bench      measure a release build; writes bench/results.json and bench/results.md
#   make deb        build sttd_<version>_<arch>.deb (no Swift toolchain needed to run it)

PREFIX ?= $(HOME)/.local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
SYSTEMD_USER_DIR ?= $(HOME)/.config/systemd/user
ZSH_COMPLETION_DIR ?= $(DATADIR)/zsh/site-functions
# ibus-daemon reads component files from IBUS_COMPONENT_PATH, else from this folder only.
IBUS_SYSTEM_COMPONENTS ?= /usr/share/ibus/component
# The login's environment (systemd's environment.d): lists $(DATADIR)/ibus/component for ibus-daemon.
ENVIRONMENT_D ?= $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/environment.d
IBUS_ENVIRONMENT_FILE = $(ENVIRONMENT_D)/60-sttd-ibus.conf
# Where install-files takes the binaries from (scripts/deb points it at a static build).
BUILD_DIR ?= .build/release
SWIFT ?= swift
# The offline engine and model scripts/setup unpacks (versioned folders; see scripts/setup).
SHERPA_ENGINE ?= sherpa-onnx-2.0.1
SHERPA_MODEL ?= moonshine-base-en-0.1.4-q8

.PHONY: all build release setup test demo bench install install-files install-ibus-path deb uninstall clean

all: build

setup:
	scripts/setup build

build: setup
	$(SWIFT) build

release: setup
	$(SWIFT) build -c release

test: build
	scripts/setup test
	$(SWIFT) build --build-tests
	scripts/sdk-setup
	SWIFT=$(SWIFT) scripts/run-tests
	scripts/deb-test

# Benchmarks never fail on a number; they print the table and write bench/results.{json,md}.
bench: release
	scripts/bench-setup
	STTD_BUILD_DIR=$(CURDIR)/.build/release scripts/test-env scripts/desktop-env .build/release/sttd-bench

demo: build
	scripts/setup demo
	scripts/test-env scripts/demo .build/debug

install:
	scripts/setup $(if $(filter .build/release,$(BUILD_DIR)),build) run
	$(if $(filter .build/release,$(BUILD_DIR)),$(SWIFT) build -c release)
	$(MAKE) --no-print-directory install-files install-ibus-path
	@systemctl --user daemon-reload 2>/dev/null || true
	@echo "Installed. Start it with: systemctl --user enable --now sttd   (or just run: sttctl status)"
	@echo "Dictation (the input method) is listed in your input sources after you log out and in again."

deb:
	scripts/deb

# The files of an installation, from $(BUILD_DIR), under $(DESTDIR)$(PREFIX).
install-files:
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSTEMD_USER_DIR) $(DESTDIR)$(DATADIR)/dbus-1/services \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces $(DESTDIR)$(DATADIR)/bash-completion/completions \
		$(DESTDIR)$(ZSH_COMPLETION_DIR) $(DESTDIR)$(DATADIR)/fish/vendor_completions.d \
		$(DESTDIR)$(DATADIR)/ibus/component
	@# One binary; sttctl and sttd-ibus are links to it, and the name it runs by picks the command.
	install -m 755 $(BUILD_DIR)/sttd $(DESTDIR)$(BINDIR)/
	ln -sfn sttd $(DESTDIR)$(BINDIR)/sttctl
	ln -sfn sttd $(DESTDIR)$(BINDIR)/sttd-ibus
	@# The input method's component file; ibus-daemon reads /usr/share/ibus/component (see docs/desktop.md).
	$(DESTDIR)$(BINDIR)/sttd-ibus --component-xml --exec $(BINDIR)/sttd-ibus > $(DESTDIR)$(DATADIR)/ibus/component/sttd.xml
	sed 's|@bindir@|$(BINDIR)|g' systemd/sttd.service > $(DESTDIR)$(SYSTEMD_USER_DIR)/sttd.service
	sed 's|@bindir@|$(BINDIR)|g' dbus/io.github.sttd.Speech1.service > $(DESTDIR)$(DATADIR)/dbus-1/services/io.github.sttd.Speech1.service
	install -m 644 dbus/io.github.sttd.Speech1.xml $(DESTDIR)$(DATADIR)/dbus-1/interfaces/
	@# Plasma's Virtual Keyboard setting lists this entry (IBus Wayland), which ibus before 1.5.29 lacks (docs/desktop.md).
	install -d $(DESTDIR)$(DATADIR)/applications
	sed 's|@bindir@|$(BINDIR)|g' packaging/io.github.sttd.IBusWayland.desktop > $(DESTDIR)$(DATADIR)/applications/io.github.sttd.IBusWayland.desktop
	@# sttd finds these relative to its own path: $(BINDIR)/../lib/sttd and ../share/sttd/models.
	@if [ -f .build/engines/$(SHERPA_ENGINE)/.complete ] && [ -f .build/models/$(SHERPA_MODEL)/.complete ]; then \
		install -d $(DESTDIR)$(PREFIX)/lib/sttd/$(SHERPA_ENGINE)/lib $(DESTDIR)$(DATADIR)/sttd/models/$(SHERPA_MODEL); \
		install -m 644 .build/engines/$(SHERPA_ENGINE)/lib/*.so $(DESTDIR)$(PREFIX)/lib/sttd/$(SHERPA_ENGINE)/lib/; \
		install -m 644 .build/engines/$(SHERPA_ENGINE)/session.conf $(DESTDIR)$(PREFIX)/lib/sttd/$(SHERPA_ENGINE)/; \
		install -m 644 .build/models/$(SHERPA_MODEL)/*.onnx .build/models/$(SHERPA_MODEL)/tokens.txt \
			.build/models/$(SHERPA_MODEL)/LICENSE $(DESTDIR)$(DATADIR)/sttd/models/$(SHERPA_MODEL)/; \
	else \
		echo "make install: no sherpa-onnx engine in .build (scripts/setup fetches it); sttd will use pocketsphinx"; \
	fi
	$(DESTDIR)$(BINDIR)/sttctl --generate-completion-script bash > $(DESTDIR)$(DATADIR)/bash-completion/completions/sttctl
	$(DESTDIR)$(BINDIR)/sttctl --generate-completion-script zsh > $(DESTDIR)$(ZSH_COMPLETION_DIR)/_sttctl
	$(DESTDIR)$(BINDIR)/sttctl --generate-completion-script fish > $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/sttctl.fish

# Lets ibus-daemon find the component outside /usr/share, from the next login on: the login's
# environment lists both folders (setting IBUS_COMPONENT_PATH replaces ibus's default folder),
# and ibus's registry cache is rebuilt with them (ibus-daemon trusts a cache whose folders did
# not change, so one written before would hide Dictation).
install-ibus-path:
	@if [ "$(DATADIR)/ibus/component" = "$(IBUS_SYSTEM_COMPONENTS)" ]; then exit 0; fi; \
	install -d "$(ENVIRONMENT_D)" && \
	printf '%s\n' "# Written by sttd's make install: ibus-daemon reads sttd's input method (Dictation) here too." \
		'IBUS_COMPONENT_PATH=$${IBUS_COMPONENT_PATH:-$(IBUS_SYSTEM_COMPONENTS)}:$(DATADIR)/ibus/component' \
		> "$(IBUS_ENVIRONMENT_FILE)" && \
	echo "make install: wrote $(IBUS_ENVIRONMENT_FILE) (read at your next login)"; \
	if command -v ibus >/dev/null; then \
		IBUS_COMPONENT_PATH="$(IBUS_SYSTEM_COMPONENTS):$(DATADIR)/ibus/component" ibus write-cache; \
	fi

uninstall:
	@systemctl --user disable --now sttd 2>/dev/null || true
	rm -f $(DESTDIR)$(BINDIR)/sttd $(DESTDIR)$(BINDIR)/sttctl $(DESTDIR)$(BINDIR)/sttd-ibus \
		$(DESTDIR)$(DATADIR)/ibus/component/sttd.xml \
		$(DESTDIR)$(SYSTEMD_USER_DIR)/sttd.service \
		$(DESTDIR)$(DATADIR)/dbus-1/services/io.github.sttd.Speech1.service \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces/io.github.sttd.Speech1.xml \
		$(DESTDIR)$(DATADIR)/applications/io.github.sttd.IBusWayland.desktop \
		$(DESTDIR)$(DATADIR)/bash-completion/completions/sttctl \
		$(DESTDIR)$(ZSH_COMPLETION_DIR)/_sttctl \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/sttctl.fish
	rm -rf $(DESTDIR)$(PREFIX)/lib/sttd/$(SHERPA_ENGINE) $(DESTDIR)$(DATADIR)/sttd/models/$(SHERPA_MODEL)
	@# Folders install made, where nothing else is left (history stays in $(DATADIR)/sttd).
	-@rmdir $(DESTDIR)$(PREFIX)/lib/sttd $(DESTDIR)$(DATADIR)/sttd/models $(DESTDIR)$(DATADIR)/ibus/component 2>/dev/null
	@if [ -z "$(DESTDIR)" ] && [ -f "$(IBUS_ENVIRONMENT_FILE)" ]; then \
		rm -f "$(IBUS_ENVIRONMENT_FILE)"; \
		if command -v ibus >/dev/null; then IBUS_COMPONENT_PATH="$(IBUS_SYSTEM_COMPONENTS)" ibus write-cache; fi; \
	fi
	@systemctl --user daemon-reload 2>/dev/null || true

clean:
	rm -rf .build
