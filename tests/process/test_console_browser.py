"""The operator console (issue 39) in a real browser: Debian's headless Chromium driven
through selenium, against one real ``hermes-actors run`` process.

One gateway and one browser serve the whole module. The tests wait on what the page shows
(``WebDriverWait``, a deadline) and on the gateway's answers (the outbox long poll), never on
a guessed sleep. They are marked ``browser`` and never skip: without Chromium they fail with
the one line that says how to install it (``.ci/run`` installs it in CI).
"""

from __future__ import annotations

import json
import shutil
import urllib.parse

import pytest

from .conftest import GatewayProcess

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKEN = "ingress-t0ken"
ADMIN = "console-admin-t0ken"
#: Seconds a page gets to show what a test waits for.
DEADLINE = 15
_INSTALL = ("headless Chromium is missing (the browser tests need `chromium` and "
            "`chromedriver` on PATH): apt-get install -y chromium chromium-driver")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway with the scripted agent, an ingress token and an admin token."""
    home = tmp_path_factory.mktemp("console") / "home"
    gw = GatewayProcess(home, "--agent", "scripted", token=TOKEN,
                        env={"HERMES_HTTP_TOKEN": TOKEN, "HERMES_HTTP_ADMIN_TOKEN": ADMIN})
    yield gw
    try:
        assert gw.stop(timeout=30) == 0
    finally:
        gw.kill()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module, its console and network logs kept."""
    chromium = shutil.which("chromium")
    chromedriver = shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.fail(_INSTALL, pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--no-first-run", "--window-size=1280,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(DEADLINE)
    yield driver
    driver.quit()


def _wait(driver, condition, message: str):
    """``condition(driver)``'s first truthy value within :data:`DEADLINE` seconds."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, DEADLINE, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        condition, message)


def _css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def _text(driver, element_id: str) -> str:
    return driver.execute_script(f"return document.getElementById('{element_id}').textContent")


def _click(driver, selector: str) -> None:
    """Click the element at ``selector`` once it is there (rows are redrawn as they change:
    a redrawn one is looked up again)."""
    def clicked(d) -> bool:
        found = _css(d, selector)
        if found:
            found[0].click()
        return bool(found)

    _wait(driver, clicked, f"something to click at {selector}")


def _row(key: str) -> str:
    return f'#sessions tbody tr[data-session-key="{key}"]'


def _console_errors(driver) -> list[dict]:
    """The browser console's SEVERE entries since the last call."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _requests(driver) -> list[str]:
    """The URLs the page requested since the last call."""
    return [url for _, url in _methods(driver)]


def _methods(driver) -> list[tuple[str, str]]:
    """``(method, URL)`` of every request since the last call (Chromium's network log)."""
    found = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            request = message["params"]["request"]
            found.append((request["method"], request["url"]))
    return found


def _sign_in(driver, gateway) -> None:
    driver.get(f"{gateway.url}/console#token={urllib.parse.quote(ADMIN)}")
    _wait(driver, lambda d: _css(d, '#conn-status[data-state="live"]'), "the console is live")


def test_no_data_without_the_token(browser, gateway):
    gateway.post("before-load", "hello")  # there is something to show
    browser.get(f"{gateway.url}/console")
    browser.execute_script("sessionStorage.clear()")
    _requests(browser)
    browser.refresh()
    _wait(browser, lambda d: d.find_element("id", "login").is_displayed(), "the sign-in form")
    assert not browser.find_element("id", "app").is_displayed()
    assert _css(browser, "#sessions tbody tr") == []
    asked = _requests(browser)
    assert any(url.endswith("/console/console.js") for url in asked), asked  # (the log works)
    assert not [url for url in asked if "/v1/" in url], asked
    # and the routes themselves refuse a request without the admin token
    for token in (False, TOKEN, "wrong"):
        assert gateway.request("GET", "/v1/admin/sessions", token=token)[0] == 401
        assert gateway.request("GET", "/v1/admin/events", token=token)[0] == 401
    assert _console_errors(browser) == []


def test_sign_in_by_fragment(browser, gateway):
    browser.get("about:blank")  # a fresh load of the page (not a same-page fragment change)
    _sign_in(browser, gateway)
    assert "#" not in browser.current_url and ADMIN not in browser.current_url
    assert browser.current_url.endswith("/console")
    stored = browser.execute_script("return sessionStorage.getItem('hermes_actors.admin_token')")
    assert stored == ADMIN
    assert browser.find_element("id", "app").is_displayed()
    assert not browser.find_element("id", "login").is_displayed()
    # the token went out only as a header: no URL the page asked for carries it
    assert not [url for url in _requests(browser) if ADMIN in url]
    assert _console_errors(browser) == []


def test_a_conversation_started_after_load_appears_live(browser, gateway):
    _sign_in(browser, gateway)
    browser.execute_script("window.notReloaded = true")
    key = gateway.post("live-1", "hello")["session_key"]
    _wait(browser, lambda d: _css(d, _row(key)), f"a row for {key}")
    assert browser.execute_script("return window.notReloaded") is True
    gateway.replies("live-1", 1)
    # its detail: the transcript tail of the finished turn
    _click(browser, _row(key))
    _wait(browser, lambda d: "echo: hello" in _text(d, "transcript"), "the transcript")
    assert _text(browser, "detail-key") == key
    assert _console_errors(browser) == []


def test_cancel_a_running_turn_from_the_page(browser, gateway):
    _sign_in(browser, gateway)
    posted = gateway.post("slow", "sleep 30")  # interruptible: ends when cancelled
    key = posted["session_key"]
    running = _row(key) + '[data-running="true"]'
    _wait(browser, lambda d: _css(d, running), "the running turn")
    _click(browser, _row(key))
    _wait(browser, lambda d: _text(d, "detail-key") == key, "its detail")
    _click(browser, '#detail button[data-action="cancel"]')
    _wait(browser, lambda d: "cancel submitted" in _text(d, "notice"), "the cancel notice")
    [stopped] = gateway.replies("slow", 1)
    assert stopped["text"] == "Stopped" and stopped["final"]
    assert posted["event_id"] in stopped["in_reply_to"]  # the notice names the cancelled event
    _wait(browser, lambda d: _css(d, _row(key) + '[data-running="false"]'), "the turn ended")
    assert _console_errors(browser) == []


def test_the_chat_panel_talks_through_the_ingress_api(browser, gateway):
    _sign_in(browser, gateway)
    browser.find_element("id", "chat-token").send_keys(TOKEN)
    chat_id = browser.find_element("id", "chat-id")
    chat_id.clear()
    chat_id.send_keys("panel")
    browser.find_element("id", "chat-text").send_keys("hi from the console")
    browser.find_element("id", "chat-send").click()
    _wait(browser, lambda d: "echo: hi from the console" in _text(d, "chat-log"), "the reply")
    assert "you (event " in _text(browser, "chat-log")
    assert gateway.replies("panel", 1)[0]["text"] == "echo: hi from the console"
    assert _console_errors(browser) == []


def test_delete_asks_first(browser, gateway):
    _sign_in(browser, gateway)
    key = gateway.post("keep-me", "hello")["session_key"]
    _click(browser, _row(key))
    _wait(browser, lambda d: _text(d, "detail-key") == key, "its detail")
    _methods(browser)
    _click(browser, '#detail button[data-action="delete"]')
    prompt = _wait(browser, lambda d: d.switch_to.alert, "the confirmation")
    assert key in prompt.text
    prompt.dismiss()  # the operator thinks again: nothing is sent
    assert browser.execute_script("return 1") == 1  # (the page goes on)
    assert not [url for method, url in _methods(browser) if method == "DELETE"]
    assert _css(browser, _row(key)) and _text(browser, "detail-key") == key
    assert _console_errors(browser) == []

    _click(browser, '#detail button[data-action="delete"]')
    _wait(browser, lambda d: d.switch_to.alert, "the confirmation").accept()
    sent: list[tuple[str, str]] = []
    wanted = ("DELETE", f"{gateway.url}/v1/admin/sessions/{urllib.parse.quote(key, safe='')}")
    _wait(browser, lambda d: sent.extend(_methods(d)) or wanted in sent, "the DELETE request")
    browser.get_log("browser")  # (what it answers is the DELETE route's business, not judged)
