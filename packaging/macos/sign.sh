#!/usr/bin/env bash
# packaging/macos/sign.sh APP ZIP: signs the .app with a Developer ID, has
# Apple notarize it, staples the ticket and zips it again (macos.yml, only
# where the secrets are set; written, not yet run). From the environment:
#   MACOS_SIGN_IDENTITY  "Developer ID Application: NAME (TEAMID)"
#   MACOS_CERT_P12       that certificate and key, base64 of a .p12
#   MACOS_CERT_PASSWORD  the .p12's password
#   APPLE_ID, APPLE_TEAM_ID, APPLE_APP_PASSWORD  for notarytool
set -euo pipefail
app=${1:?usage: sign.sh APP ZIP} zip=${2:?usage: sign.sh APP ZIP}
: "${MACOS_SIGN_IDENTITY:?}" "${MACOS_CERT_P12:?}" "${MACOS_CERT_PASSWORD:?}"
: "${APPLE_ID:?}" "${APPLE_TEAM_ID:?}" "${APPLE_APP_PASSWORD:?}"
kc=$RUNNER_TEMP/sign.keychain-db kcpass=$(uuidgen)
security create-keychain -p "$kcpass" "$kc"
security set-keychain-settings -lut 3600 "$kc"
security unlock-keychain -p "$kcpass" "$kc"
base64 --decode <<<"$MACOS_CERT_P12" >"$RUNNER_TEMP/cert.p12"
security import "$RUNNER_TEMP/cert.p12" -k "$kc" -P "$MACOS_CERT_PASSWORD" -T /usr/bin/codesign
security set-key-partition-list -S apple-tool:,apple: -k "$kcpass" "$kc" >/dev/null
security list-keychains -d user -s "$kc" $(security list-keychains -d user | tr -d '"')
codesign --force --deep --options runtime --timestamp --sign "$MACOS_SIGN_IDENTITY" "$app"
codesign --verify --strict --verbose=2 "$app"
ditto -c -k --keepParent "$app" "$zip"
xcrun notarytool submit "$zip" --apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" --password "$APPLE_APP_PASSWORD" --wait
xcrun stapler staple "$app"
rm -f "$zip"
ditto -c -k --keepParent "$app" "$zip"
