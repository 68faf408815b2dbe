package macos

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// AppleSMC user-client protocol, as used by the open-source smcFanControl
// and iStats tools (Apple publishes no header for it).
const (
	smcHandleYPCEvent = 2 // IOConnectCallStructMethod selector
	smcCmdReadKey     = 5
	smcCmdGetKeyInfo  = 9
)

// smcKeyData mirrors SMCKeyData_t (80 bytes, natural C alignment). The
// padding fields are explicit so the Go and C layouts match byte for byte.
type smcKeyData struct {
	key            uint32   // @0, four-char code, big-endian packed
	vers           [6]byte  // @4
	_              [2]byte  // @10
	pLimitData     [16]byte // @12
	dataSize       uint32   // @28 keyInfo.dataSize
	dataType       uint32   // @32 keyInfo.dataType
	dataAttributes uint8    // @36 keyInfo.dataAttributes
	_              [3]byte  // @37
	result         uint8    // @40
	status         uint8    // @41
	data8          uint8    // @42
	_              uint8    // @43
	data32         uint32   // @44
	bytes          [32]byte // @48
}

// A layout mistake must fail the build, not corrupt kernel replies.
var (
	_ [80 - unsafe.Sizeof(smcKeyData{})]byte
	_ [unsafe.Sizeof(smcKeyData{}) - 80]byte
	_ [28 - unsafe.Offsetof(smcKeyData{}.dataSize)]byte
	_ [unsafe.Offsetof(smcKeyData{}.dataSize) - 28]byte
	_ [40 - unsafe.Offsetof(smcKeyData{}.result)]byte
	_ [unsafe.Offsetof(smcKeyData{}.result) - 40]byte
	_ [48 - unsafe.Offsetof(smcKeyData{}.bytes)]byte
	_ [unsafe.Offsetof(smcKeyData{}.bytes) - 48]byte
)

type smcKeyInfo struct {
	size uint32
	typ  uint32
}

// SMC is an open connection to the AppleSMC user client. Not safe for
// concurrent use.
type SMC struct {
	io   *ioKitAPI
	conn uint32
	info map[uint32]smcKeyInfo // key info never changes; cache it
}

// OpenSMC connects to AppleSMC. Close it when done.
func OpenSMC() (*SMC, error) {
	io, err := loadIOKit()
	if err != nil {
		return nil, err
	}
	task, err := machTaskSelf()
	if err != nil {
		return nil, err
	}
	svc, err := matchingService(io, "AppleSMC")
	if err != nil {
		return nil, err
	}
	defer io.objectRelease(svc)
	var conn uint32
	if kr := io.serviceOpen(svc, task, 0, &conn); kr != 0 || conn == 0 {
		return nil, fmt.Errorf("macos: IOServiceOpen(AppleSMC): kern_return 0x%x", uint32(kr))
	}
	return &SMC{io: io, conn: conn, info: map[uint32]smcKeyInfo{}}, nil
}

// Close closes the connection; it is safe to call more than once.
func (s *SMC) Close() error {
	if s == nil || s.conn == 0 {
		return nil
	}
	kr := s.io.serviceClose(s.conn)
	s.conn = 0
	if kr != 0 {
		return fmt.Errorf("macos: IOServiceClose: kern_return 0x%x", uint32(kr))
	}
	return nil
}

func fourCC(s string) (uint32, error) {
	if len(s) != 4 {
		return 0, fmt.Errorf("macos: SMC key %q is not four characters", s)
	}
	return binary.BigEndian.Uint32([]byte(s)), nil
}

func (s *SMC) call(in *smcKeyData) (smcKeyData, error) {
	var out smcKeyData
	outSize := unsafe.Sizeof(out)
	kr := s.io.connectCallStructMethod(s.conn, smcHandleYPCEvent,
		unsafe.Pointer(in), unsafe.Sizeof(*in), unsafe.Pointer(&out), &outSize)
	if kr != 0 {
		return out, fmt.Errorf("macos: SMC call: kern_return 0x%x", uint32(kr))
	}
	if out.result != 0 {
		// 0x84 (132) is kSMCKeyNotFound.
		return out, fmt.Errorf("macos: SMC result 0x%x", out.result)
	}
	return out, nil
}

func (s *SMC) keyInfo(key uint32) (smcKeyInfo, error) {
	if ki, ok := s.info[key]; ok {
		return ki, nil
	}
	out, err := s.call(&smcKeyData{key: key, data8: smcCmdGetKeyInfo})
	if err != nil {
		return smcKeyInfo{}, err
	}
	ki := smcKeyInfo{size: out.dataSize, typ: out.dataType}
	s.info[key] = ki
	return ki, nil
}

// ReadFloat reads an SMC key of type "flt " (little-endian float32 on
// Apple silicon), e.g. "PSTR" for total system power in watts.
func (s *SMC) ReadFloat(key string) (float64, error) {
	if s == nil || s.conn == 0 {
		return 0, fmt.Errorf("macos: SMC closed")
	}
	k, err := fourCC(key)
	if err != nil {
		return 0, err
	}
	ki, err := s.keyInfo(k)
	if err != nil {
		return 0, fmt.Errorf("%s key info: %w", key, err)
	}
	flt, _ := fourCC("flt ")
	if ki.typ != flt || ki.size != 4 {
		var t [4]byte
		binary.BigEndian.PutUint32(t[:], ki.typ)
		return 0, fmt.Errorf("macos: SMC key %s has unsupported type %q size %d", key, t[:], ki.size)
	}
	in := smcKeyData{key: k, data8: smcCmdReadKey}
	in.dataSize = ki.size
	out, err := s.call(&in)
	if err != nil {
		return 0, fmt.Errorf("%s read: %w", key, err)
	}
	v := float64(math.Float32frombits(binary.LittleEndian.Uint32(out.bytes[:4])))
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("macos: SMC key %s is not finite", key)
	}
	return v, nil
}
