# sttd — speech-to-text for the Linux desktop.
#   make demo       dictate recorded speech through a virtual microphone (headless is fine)
#   make test       install what the tests need, build, and run the whole suite, then install
#                   the package (make deb) into a fresh Debian root and dictate there
#   make install    install for the current user (PREFIX=$(HOME)/.local)
#   make bench      measure a release build; writes bench/results.json and bench/results.md
#   make deb        build sttd_<version>_<arch>.deb (no Swift toolchain needed to run it)

PREFIX ?= $(HOME)/.local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
SYSTEMD_USER_DIR ?= $(HOME)/.config/systemd/user
ZSH_COMPLETION_DIR ?= $(DATADIR)/zsh/site-functions
# Where install-files takes the binaries from (scripts/deb points it at a static build).
BUILD_DIR ?= .build/release
SWIFT ?= swift
# The offline engine and model scripts/setup unpacks (versioned folders; see scripts/setup).
SHERPA_ENGINE ?= sherpa-onnx-2.0.1
SHERPA_MODEL ?= moonshine-base-en-0.1.4-q8

.PHONY: all build release setup test demo bench install install-files deb uninstall clean

all: build

setup:
	scripts/setup

build: setup
	$(SWIFT) build

release: setup
	$(SWIFT) build -c release

test: build
	$(SWIFT) build --build-tests
	scripts/sdk-setup
	SWIFT=$(SWIFT) scripts/run-tests
	scripts/deb-test

# Benchmarks never fail on a number; they print the table and write bench/results.{json,md}.
bench: release
	scripts/bench-setup
	STTD_BUILD_DIR=$(CURDIR)/.build/release scripts/test-env scripts/desktop-env .build/release/sttd-bench

demo: build
	scripts/test-env scripts/demo .build/debug

install: release install-files
	@systemctl --user daemon-reload 2>/dev/null || true
	@echo "Installed. Start it with: systemctl --user enable --now sttd   (or just run: sttctl status)"

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

uninstall:
	@systemctl --user disable --now sttd 2>/dev/null || true
	rm -f $(DESTDIR)$(BINDIR)/sttd $(DESTDIR)$(BINDIR)/sttctl $(DESTDIR)$(BINDIR)/sttd-ibus \
		$(DESTDIR)$(DATADIR)/ibus/component/sttd.xml \
		$(DESTDIR)$(SYSTEMD_USER_DIR)/sttd.service \
		$(DESTDIR)$(DATADIR)/dbus-1/services/io.github.sttd.Speech1.service \
		$(DESTDIR)$(DATADIR)/dbus-1/interfaces/io.github.sttd.Speech1.xml \
		$(DESTDIR)$(DATADIR)/bash-completion/completions/sttctl \
		$(DESTDIR)$(ZSH_COMPLETION_DIR)/_sttctl \
		$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/sttctl.fish
	rm -rf $(DESTDIR)$(PREFIX)/lib/sttd/$(SHERPA_ENGINE) $(DESTDIR)$(DATADIR)/sttd/models/$(SHERPA_MODEL)
	@systemctl --user daemon-reload 2>/dev/null || true

clean:
	rm -rf .build
