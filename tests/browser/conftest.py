"""The browser test's screenshots, listed at the end of the run (from each test's report, so that they are listed
under pytest-xdist too, where the tests run in other processes)."""


def pytest_terminal_summary(terminalreporter):
    shots = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        for name, value in getattr(report, "user_properties", ())
        if name == "screenshot" and getattr(report, "when", "call") == "call"
    ]
    if shots:
        terminalreporter.section("browser screenshots")
        for shot in dict.fromkeys(shots):
            terminalreporter.line(shot)
