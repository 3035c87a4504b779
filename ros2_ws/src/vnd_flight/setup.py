"""ament_python package that is also pip-installable (``pip install -e .``)."""

from setuptools import find_packages, setup

PACKAGE_NAME = "vnd_flight"

setup(
    name=PACKAGE_NAME,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE_NAME]),
        ("share/" + PACKAGE_NAME, ["package.xml"]),
    ],
    install_requires=[
        "vnd_core",
        "numpy>=1.24",
        "torch>=2.2,<3",
        "transforms3d>=0.4",
        "rosbags>=0.10",
        "mcap>=1.1",
    ],
    zip_safe=False,
    maintainer="VND flight stack developers",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [],
    },
)
