#!/usr/bin/env bash
# Sign QuantDesk.app with the hardened runtime, pack the .dmg, notarize and staple it.
#
#   packaging/macos/sign_and_notarize.sh dist/QuantDesk.app dist/QuantDesk-x.y.z-macos-arm64-metal.dmg
#
# Runs when the signing secrets are present (the release workflow imports the certificate
# into a temporary keychain first); without them pack_macos.py makes an unsigned .dmg,
# which macOS opens only after right-click > Open.
#   MACOS_SIGN_IDENTITY   "Developer ID Application: Name (TEAMID)"
#   APPLE_ID, APPLE_TEAM_ID, APPLE_APP_PASSWORD   (an app-specific password) for notarytool
set -euo pipefail
APP="$1"; DMG="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MACOS_SIGN_IDENTITY:?set MACOS_SIGN_IDENTITY}"
sign() { codesign --force --timestamp --options runtime --entitlements "$HERE/entitlements.plist" --sign "$MACOS_SIGN_IDENTITY" "$@"; }

# Inside out: every library and executable first, then the bundle (no --deep, which
# Apple discourages: it would sign resources as code and use one entitlement set for all).
find "$APP/Contents" -type f \( -name '*.dylib' -o -name '*.so' -o -perm -u+x \) -print0 |
    while IFS= read -r -d '' f; do
        if file "$f" | grep -q 'Mach-O'; then sign "$f"; fi
    done
sign "$APP"
codesign --verify --strict --deep --verbose=2 "$APP"

dmgbuild -s "$HERE/dmg_settings.py" -D app="$APP" QuantDesk "$DMG"
codesign --force --timestamp --sign "$MACOS_SIGN_IDENTITY" "$DMG"

if [[ -n "${APPLE_ID:-}" && -n "${APPLE_TEAM_ID:-}" && -n "${APPLE_APP_PASSWORD:-}" ]]; then
    xcrun notarytool submit "$DMG" --apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" \
        --password "$APPLE_APP_PASSWORD" --wait
    xcrun stapler staple "$DMG"
    spctl --assess --type open --context context:primary-signature --verbose=2 "$DMG"
else
    echo "Signed but not notarized: APPLE_ID, APPLE_TEAM_ID or APPLE_APP_PASSWORD is not set."
fi
