# dmgbuild settings for QuantDesk's disk image: the app and a link to /Applications, side by
# side, so installing is one drag. pack_macos.py runs:
#   dmgbuild -s packaging/macos/dmg_settings.py -D app=dist/QuantDesk.app "QuantDesk" out.dmg
# (dmgbuild executes this file with `defines` holding the -D values.)
import os.path

application = defines.get("app", "dist/QuantDesk.app")  # noqa: F821 (given by dmgbuild)
appname = os.path.basename(application)

format = "UDZO"  # zlib-compressed, readable on every macOS version
filesystem = "HFS+"
size = None  # dmgbuild measures the app
files = [application]
symlinks = {"Applications": "/Applications"}
icon_locations = {appname: (140, 160), "Applications": (400, 160)}
window_rect = ((200, 120), (540, 340))
default_view = "icon-view"
show_icon_preview = False
icon_size = 96
text_size = 13
